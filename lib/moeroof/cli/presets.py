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
from collections import Counter
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


SCHEMA_COLUMNS = ("kind", "field", "required", "dimension", "unit", "default", "meaning")


def print_schema(rep: dict[str, Any]) -> None:
    print('Preset schema (TOML: kind = "model" | "hardware", name = "…", then one inline table a field:')
    print('  FIELD = { value = N, unit = "U", source = "…" }  or  { …, assumed = true, note = "…" };')
    print("  witnessed = true (with a source) marks a measured number; counts take no unit)")

    def default_cell(value: Any, dimension: str) -> str:
        return "-" if value in (None, "") else value if dimension == "text" else f"{value:g} (assumed)"

    rows = [  # the CSV's rows
        [kind, field, "yes" if required else "no", unit, default_cell(default, dimension), meaning]
        for kind, field, required, dimension, unit, default, meaning in schema_csv(rep)[1]
    ]
    print(table(["kind", "field", "required", "unit (e.g.)", "default", "meaning"], rows, "<<<<<<"))
    print("an optional field without a default is needed only where the model uses it (an error names it then)")


def schema_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    return list(SCHEMA_COLUMNS), [[r[c] for c in SCHEMA_COLUMNS] for r in rep["fields"]]


#: each provenance tag's letter, the strongest first
_TAG_LETTER = {"witnessed": "w", "projected": "p", "assumed": "a"}


def _preset_entry(obj: Any, fields: Sequence[str]) -> dict[str, Any]:
    """One preset as JSON: description, the fields its file sets (SI), provenance, sources, path."""
    entry: dict[str, Any] = {"description": obj.description}
    if getattr(obj, "precision", ""):
        entry["precision"] = obj.precision
    for key in fields:
        if key in obj.provenance:
            entry[key] = getattr(obj, key)
    return {**entry, "provenance": dict(obj.provenance), "sources": dict(obj.sources), "path": obj.path}


def presets_report() -> dict[str, Any]:
    """Every shipped preset, as the ``presets`` subcommand prints it with ``--json``."""
    from moeroof.data.io import InputError
    from moeroof.data.presets import HARDWARE_FIELDS, MODEL_FIELDS, Hardware, list_presets, load_hardware, load_model

    shipped = list_presets()
    rep: dict[str, Any] = {"models": {}, "hardware": {}}
    broken: dict[str, str] = {}
    # one broken TOML dropped into data/presets is listed with its error; the others still load
    for kind, load, fields in (("models", load_model, MODEL_FIELDS), ("hardware", load_hardware, HARDWARE_FIELDS)):
        for name, path in shipped[kind].items():
            try:
                preset = load(path)
            except InputError as err:
                broken[f"{kind}/{name}"] = str(err)
                continue
            entry = _preset_entry(preset, list(fields))
            rep[kind][name] = {**entry, "link": preset.link} if isinstance(preset, Hardware) else entry
    if broken:
        rep["broken"] = broken
    return jsonable(rep)


def ssd_cell(entry: dict[str, Any], read_size: float) -> str:
    """SSD bandwidth at one read size (log-log interpolation of the curve, clamped at its ends).

    The tag is the weaker of the curve's two fields; a value read between or beyond the measured
    points is at best ``projected``."""
    from moeroof.core.units import from_si

    prov = entry["provenance"]
    tag = max(prov["ssd_read_size_bytes"], prov["bw_ssd_bytes_per_s"], key=list(_TAG_LETTER).index)
    if tag == "witnessed" and not any(math.isclose(s, read_size) for s in entry["ssd_read_size_bytes"]):
        tag = "projected"
    return f"{fmt(from_si(_stream_bw(entry, read_size), 'GB/s'))} {_TAG_LETTER[tag]}"


def _stream_bw(entry: dict[str, Any], read_size: float) -> Any:
    """The streaming bandwidth at one read size: log-log interpolation of the curve, clamped at its
    ends (None without a curve)."""
    sizes, bws = entry.get("ssd_read_size_bytes"), entry.get("bw_ssd_bytes_per_s")
    if sizes is None or bws is None:
        return None
    return float(np.exp(np.interp(np.log(read_size), np.log(np.atleast_1d(sizes)), np.log(np.atleast_1d(bws)))))


#: the readable tables' columns after the name: (header, field, unit it is shown in, decimals)
Cells = tuple[tuple[str, Any, str | None, int], ...]
MODEL_CELLS: Cells = (("E", "experts", None, 2), ("K", "top_k", None, 2), ("layers", "moe_layers", None, 2))
MODEL_CELLS += (("expert MB", "expert_bytes", "MB", 1), ("non-routed GB", "non_routed_bytes", "GB", 1))
MODEL_CELLS += (("KV KiB/token", "kv_bytes_per_token", "KiB", 1), ("GFLOP/token", "flops_per_token", "GFLOP", 1))
#: a hardware field None: the streaming tier's name; a number: the streaming bandwidth at that read size
HARDWARE_CELLS: Cells = (("RAM GiB", "ram_bytes", "GiB", 1), ("mem GB/s", "bw_mem_bytes_per_s", "GB/s", 1))
HARDWARE_CELLS += (("TFLOP/s", "flops_per_s", "TFLOP/s", 1), ("experts from", None, None, 0))
HARDWARE_CELLS += (("stream GB/s @128KiB", 128 * 2**10, None, 0), ("stream GB/s @8MiB", 8 * 2**20, None, 0))
HARDWARE_CELLS += (("fabric GB/s", "bw_link_bytes_per_s", "GB/s", 1),)


def _cell(entry: dict[str, Any], key: Any, unit: str | None, digits: int) -> str:
    """A table cell: the field in ``unit`` (SI → unit through moeroof.core.units) and its tag letter
    (a read size: :func:`ssd_cell`; None: the streaming tier)."""
    from moeroof.core.units import from_si

    if not isinstance(key, str):  # the streaming tier's name, or its bandwidth at a read size
        return entry.get("link", "ssd") if key is None else ssd_cell(entry, key)
    value, tag = entry.get(key), entry["provenance"].get(key)
    if value is None or tag is None:
        return "-"
    shown = value if unit is None else from_si(value, unit)
    return f"{fmt(shown, digits)} {_TAG_LETTER[tag]}"


def print_presets(rep: dict[str, Any]) -> None:
    for kind, cells, align in (("models", MODEL_CELLS, "<>>>>>>>"), ("hardware", HARDWARE_CELLS, "<>>><>>>")):
        rows = [[name] + [_cell(e, *c[1:]) for c in cells] for name, e in rep[kind].items()]
        print(f"{kind} (data/presets/{kind})")
        print(table([kind.rstrip("s"), *(c[0] for c in cells)], rows, align))
        if kind == "hardware":
            print(
                "experts from: what the step model's streaming term reads through (ssd, pcie, host-link, page-cache); "
                "fabric: the link between boxes of a multi-node run"
            )
        print()
    counts = Counter(
        tag for kind in ("models", "hardware") for e in rep[kind].values() for tag in e["provenance"].values()
    )
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
CSV_COLUMNS: tuple[str, ...] = ("kind", "name", "description", "precision", "experts", "top_k", "moe_layers")
CSV_COLUMNS += ("expert_bytes", "non_routed_bytes", "kv_bytes_per_token", "flops_per_token", "ram_bytes")
CSV_COLUMNS += ("bw_mem_bytes_per_s", "flops_per_s", "link", "stream_bytes_per_s_at_128KiB")
CSV_COLUMNS += ("stream_bytes_per_s_at_8MiB", "bw_link_bytes_per_s", "not_witnessed", "path")


def presets_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per preset, models first; ``not_witnessed`` lists the fields
    tagged projected or assumed (``field=tag`` separated by ``;``)."""
    from moeroof.core.units import KiB, MiB

    rows = []
    for kind in ("models", "hardware"):
        for name, entry in rep[kind].items():
            row: dict[str, Any] = {c: entry.get(c) for c in CSV_COLUMNS}
            row.update(kind="model" if kind == "models" else "hardware", name=name)
            for col, size in (("stream_bytes_per_s_at_128KiB", 128 * KiB), ("stream_bytes_per_s_at_8MiB", 8 * MiB)):
                bw = _stream_bw(entry, size) if kind == "hardware" else None
                # the interpolation's round-off (1.51e9 read back as 1510000000.0000021)
                row[col] = None if bw is None else float(f"{bw:.6g}")
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
