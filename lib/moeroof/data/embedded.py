"""The routing a model gets when it is not given: ``auto`` routing, and the shape (E, K) of a
routing file read from its meta alone.

A notebook whose routing default is a file made for one model (net_toks' DeepSeek-V3-like
histogram, 256 experts, top 8) breaks the moment a user asks for another model. Its default is
instead ``auto``, resolved here for the model actually asked for (:func:`default_routing`):

1. the notebook's preferred embedded file, when its E and K are the model's;
2. otherwise the first embedded histogram or trace under ``data/`` (sorted by name) with the
   model's E and K — a file whose recorded model name matches the preset's first;
3. otherwise :data:`FALLBACK_ROUTING`, the skew prior (no embedded data has that E, K;
   :func:`moeroof.models.plan.prior_routing`).

The reason comes back with the choice, so that the answer can say which default was taken.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moeroof.core import paths
from moeroof.data.io import InputError, sidecar_path

__all__ = ["FALLBACK_ROUTING", "ROUTING_SUFFIXES", "RoutingDefault", "routing_shape", "default_routing", "is_file_spec"]

#: the routing of a model no embedded data was captured for: the skew prior (fitted on public
#: routing of fine-grained MoE models, assumed for this one)
FALLBACK_ROUTING = "prior"
#: what a routing file may be
ROUTING_SUFFIXES = (".csv", ".npz", ".npy", ".parquet")


@dataclass(frozen=True)
class RoutingDefault:
    """What ``auto`` became: ``spec`` (a path under ``data/`` or ``prior``) and ``why``, in words."""

    spec: str
    why: str


def is_file_spec(spec: str) -> bool:
    """Whether a routing spec names a file (not ``prior``, ``uniform``, ``zipf:S``,
    ``dirichlet:A``, ``auto`` or empty)."""
    s = spec.strip().lower()
    return bool(s) and s not in ("prior", "uniform", "auto") and not s.startswith(("zipf", "dirichlet"))


def routing_shape(path: str | os.PathLike[str]) -> tuple[int, int, str | None]:
    """``(experts, top_k, model)`` of a histogram ``.csv`` (its sidecar) or a trace (``.npz``'s
    ``meta``, ``.npy``'s sidecar, ``.parquet``'s schema), read from the meta alone: no counts or
    ids are loaded, so a large trace is checked in milliseconds. Raises :class:`InputError`."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in ROUTING_SUFFIXES:
        raise InputError(p, "-", "file", f"expected a histogram .csv or a trace .npz/.npy/.parquet, got {p.suffix!r}")
    if not p.is_file():
        raise InputError(p, "-", "file", "no such file")
    if suffix == ".parquet":
        from moeroof.data.trace_parquet import read_parquet_trace

        t = read_parquet_trace(p)
        return int(t.experts), int(t.top_k), t.meta.get("model")
    if suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as npz:
                if "meta" not in npz.files:
                    raise InputError(p, "-", "meta", "missing array: the trace's meta (experts, top_k) is not in it")
                meta = json.loads(str(npz["meta"]))
        except InputError:
            raise
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(p, "-", "file", f"not a readable .npz trace: {exc}") from None
        where = p
    else:
        where = sidecar_path(p)
        try:
            meta = json.loads(where.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(where, "-", "file", f"no sidecar (the {p.name} meta: experts, top_k)") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(where, "-", "file", f"not a JSON sidecar: {exc}") from None
    if not isinstance(meta, dict):
        raise InputError(where, "-", "meta", "expected a JSON object")
    try:
        e, k = int(meta["experts"]), int(meta["top_k"])
    except (KeyError, TypeError, ValueError):
        raise InputError(where, "-", "experts", "the meta needs integer experts and top_k") from None
    model = meta.get("model")
    return e, k, model if isinstance(model, str) else None


def _embedded() -> list[tuple[str, int, int, str | None]]:
    """Every embedded routing file: (name under data/, E, K, recorded model), sorted by name."""
    out = []
    for folder in ("histograms", "traces"):
        for p in sorted((paths.DATA_DIR / folder).glob("*")):
            if p.suffix.lower() not in ROUTING_SUFFIXES or p.suffix.lower() == ".npy":
                continue
            try:
                e, k, model = routing_shape(p)
            except InputError:
                continue
            out.append((f"{folder}/{p.name}", e, k, model))
    return out


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def default_routing(model_name: str, experts: int, top_k: int, preferred: str | None = None) -> RoutingDefault:
    """The routing ``auto`` means for a model of ``experts`` routed experts and top ``top_k``
    (module docstring); ``preferred``: the notebook's own default file, kept when it fits."""
    here = f"E={experts}, K={top_k}"
    files = _embedded()
    if preferred:
        for name, e, k, _ in files:
            if name == preferred and (e, k) == (experts, top_k):
                return RoutingDefault(name, f"the notebook's default routing data, which has the model's {here}")
    same = [(name, model) for name, e, k, model in files if (e, k) == (experts, top_k)]
    if same:
        want = _key(model_name)
        named = [n for n, m in same if m and (_key(m).startswith(want[:6]) or want.startswith(_key(m)[:6]))]
        name = (named or [n for n, _ in same])[0]
        return RoutingDefault(name, f"the embedded routing data with the model's {here}")
    return RoutingDefault(
        FALLBACK_ROUTING,
        f"the skew prior (fitted on public routing of fine-grained MoE models, assumed for this one): no "
        f"embedded routing data has the model's {here}",
    )
