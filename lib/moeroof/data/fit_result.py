"""A ``moeroof fit-plan --json`` result read back as the knobs a plan runs with (``plan --fit
FIT.json``, the whatif notebook's ``fit``).

A knob is taken when the fit fitted it or held it at a prior (a knob the fit left at the preset's
is the preset's anyway): ``engine_seconds_per_step``, ``engine_seconds_per_agent_token``,
``engine_seconds_per_touched_expert``, ``ssd_scale``, ``page_cache_share``, ``skew``, ``rho``, and the
efficiencies ``mem_efficiency``, ``compute_efficiency``, ``link_efficiency`` (held at their priors). The fit's model and box are kept so that a
plan on another model or box can be refused, and its routing spec so that the plan runs on the
routing the fit did.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from moeroof.core.input_files import open_input
from moeroof.core.limits import MAX_JSON_BYTES, check_document, unique_keys
from moeroof.data.io import InputError

__all__ = ["KNOB_KEYS", "read_fit"]

KNOB_KEYS = (
    "engine_seconds_per_step",
    "engine_seconds_per_agent_token",
    "engine_seconds_per_touched_expert",
    "ssd_scale",
    "reclaim_penalty",
    "reclaim_exponent",
    "page_cache_share",
    "skew",
    "rho",
    "locality_c_per_expert",
    "mem_efficiency",
    "compute_efficiency",
    "link_efficiency",
)


def _read_json(p: Path) -> Any:
    """The JSON document in ``p``, bounded; :class:`InputError` naming the file otherwise."""
    try:
        with open_input(p, text=True) as fh:  # a FIFO refused, never waited on
            text = fh.read(MAX_JSON_BYTES + 1)
        if len(text) > MAX_JSON_BYTES:
            raise InputError(p, "-", "file", f"larger than the {MAX_JSON_BYTES >> 20} MiB a fit result may be")
        check_document(text, str(p), max_bytes=MAX_JSON_BYTES)
        return json.loads(text, object_pairs_hook=unique_keys)
    except FileNotFoundError:
        raise InputError(p, "-", "file", "no such file") from None
    except OSError as err:
        raise InputError(p, "-", "file", f"cannot read: {err.strerror or err}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(p, "-", "file", f"not a JSON file ({err})") from None
    except InputError:
        raise
    except ValueError as err:  # check_document's size or nesting
        raise InputError(p, "-", "file", str(err)) from None


def read_fit(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"path", "model", "hardware", "routing_spec"?, "page_cache", KNOB: value …}`` from a
    fit-plan JSON result; :class:`InputError` naming the file and field otherwise."""
    p = Path(path)
    doc = _read_json(p)
    if not isinstance(doc, dict) or not isinstance(doc.get("knobs"), dict):
        raise InputError(p, "-", "knobs", "expected a fit-plan result in JSON (with its knobs)")
    out: dict[str, Any] = {"path": str(p), "model": doc.get("model"), "hardware": doc.get("hardware")}
    if isinstance(doc.get("routing_spec"), str):
        out["routing_spec"] = doc["routing_spec"]
    for key, entry in doc["knobs"].items():
        if key not in KNOB_KEYS or not isinstance(entry, dict):
            continue
        held = str(entry.get("held", ""))
        # fitted, or held at a stated prior (the per-token engine cost; one stream's locality)
        if not (entry.get("fitted") or held.startswith("prior") or held.startswith("locality prior")):
            continue
        try:
            value = float(entry["value"])
        except (KeyError, TypeError, ValueError):
            raise InputError(p, "-", f"knobs.{key}", "has no numeric value") from None
        if not math.isfinite(value) or value < 0:
            raise InputError(p, "-", f"knobs.{key}", f"{value!r} is not a finite number >= 0")
        if key.endswith("_efficiency") and not 0 < value <= 1:
            raise InputError(p, "-", f"knobs.{key}", f"{value!r} is not a share in (0, 1]")
        out[key] = value
        if key == "skew":
            # the routing family the skew was fitted in (a result written before it was recorded: Zipf)
            family = entry.get("family", "zipf")
            if family not in ("zipf", "dirichlet"):
                raise InputError(p, "-", "knobs.skew.family", f"expected zipf or dirichlet, got {family!r}")
            out["skew_family"] = family
    out["page_cache"] = bool(doc.get("page_cache", False)) or "page_cache_share" in out
    return out
