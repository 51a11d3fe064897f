"""Check a notebook's parameters as a whole before a kernel starts.

``moeroof report -p model qwen3-30b-a3b`` used to start net_toks and fail six seconds in, in a
cell, because the default routing was a 256-expert histogram. Every combination that can be
checked without running the notebook is checked here, and every problem is reported at once in
one line (the CLI's ``error:`` line, exit 2):

- ``model`` and ``hardware`` load as presets (or TOML paths);
- each routing parameter (``routing``, ``histogram``, ``per_layer_histogram``, ``trace``) is
  ``auto``, ``uniform``, ``zipf:S`` with S ≥ 0, empty where the notebook allows it, or a file
  whose meta (:func:`moeroof.data.embedded.routing_shape`) has the model's E and K;
- ranges hold: ``NAME_min ≤ NAME_max``, batch sizes ≥ 1, sizes and contexts ≥ 0;
- every other text parameter that names a data file (by its suffix: .csv, .npz, .toml, …) exists,
  except an output (``out``).

:func:`problems` returns the list (the widgets show the same lines); :func:`check` raises.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, TypeGuard

__all__ = ["ROUTING_PARAMETERS", "problems", "check", "PreflightError"]

#: parameters that name a routing (a model's expert popularity): checked against the model's E, K
ROUTING_PARAMETERS = ("routing", "histogram", "per_layer_histogram", "trace")
#: integer parameters that are batch sizes or counts: at least 1
_AT_LEAST_ONE = ("b_min", "b_max", "claim_b_max", "streams", "trace_streams", "trace_steps", "trace_layers")
#: numbers that are sizes or lengths: at least 0
_AT_LEAST_ZERO = (
    "cache_gib",
    "contrast_cache_gib",
    "ladder_cache_gib",
    "cache_gib_max",
    "context_tokens",
    "ssd_gb_s",
    "mem_gb_s",
)
#: sizes that may also be ``auto`` (a default that follows the model, :func:`moeroof.models.plan.default_cache`)
_AUTO_OR_NUMBER = ("cache_gib", "contrast_cache_gib")
_FILE_SUFFIXES = (".csv", ".npz", ".npy", ".parquet", ".toml", ".json", ".yaml", ".yml", ".pt")


class PreflightError(ValueError):
    """A notebook's parameters that cannot work together; ``str()`` is one line with every problem."""


def _default(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


#: spec prefix → (its letter, an example, whether a parsed value is good, the problem when not)
_SPEC_CHECKS = {
    "zipf": ("S", "0.9", lambda s: s >= 0 and s != float("inf"), "the Zipf exponent must be a finite number >= 0"),
    "dirichlet": ("A", "0.6", lambda a: 1e-3 <= a <= 1e12, "the Dirichlet concentration must be in [0.001, 1e12]"),
}


def _check_spec(kind: str, name: str, value: str) -> str | None:
    letter, example, good, problem = _SPEC_CHECKS[kind]
    try:
        x = float(value.split(":", 1)[1])
    except (IndexError, ValueError):
        return f"-p {name}: {value!r}: expected {kind}:{letter} with a number {letter} (e.g. {kind}:{example})"
    return None if good(x) else f"-p {name}: {value!r}: {problem}"


def _preset_problems(values: Mapping[str, Any], out: list[str]) -> Any:
    """The model and hardware presets' problems into ``out``; returns the model (None when not given
    or not loadable)."""
    from moeroof.data.presets import load_hardware, load_model

    loaded = {}
    for name, load in (("model", load_model), ("hardware", load_hardware)):
        if isinstance(values.get(name), str) and values[name].strip():
            try:
                loaded[name] = load(values[name])
            except (ValueError, OSError) as err:
                out.append(f"-p {name}: {err}")
    return loaded.get("model")


def _routing_problem(name: str, value: Any, model: Any) -> str | None:
    """The problem of one routing parameter (a spec or a file whose E and K must match the model)."""
    from moeroof.core.paths import resolve_data
    from moeroof.data.embedded import is_file_spec, routing_shape

    if not isinstance(value, str) or not value.strip():
        return None
    spec = value.strip()
    if spec.lower() in ("auto", "uniform", "prior"):
        return None
    for kind in ("dirichlet", "zipf"):
        if spec.lower().startswith(kind):
            return _check_spec(kind, name, spec)
    if not is_file_spec(spec):
        return None
    try:
        e, k, _ = routing_shape(resolve_data(spec))
    except (ValueError, OSError) as err:
        return f"-p {name}: {err}"
    if model is not None and (e, k) != (model.experts, model.top_k):
        return f"-p {name}: {spec} has E={e}, K={k} but model {model.name} has E={model.experts}, K={model.top_k}" + (
            " (auto picks routing data that matches the model)" if name == "routing" else ""
        )
    return None


def _number_problems(values: Mapping[str, Any]) -> list[str]:
    """The numbers' problems: below their least value, not a number, a ``_min`` above its ``_max``."""

    def number(v: Any) -> TypeGuard[int | float]:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    out: list[str] = []
    for names, least, must in ((_AT_LEAST_ONE, 1, "must be at least 1"), (_AT_LEAST_ZERO, 0, "must be >= 0")):
        for name in names:
            v = values.get(name)
            if name in _AUTO_OR_NUMBER and isinstance(v, str) and v.strip().lower() != "auto":
                out.append(f"-p {name}: expected a number or auto, got {v!r}")
            if number(v) and v < least:
                out.append(f"-p {name}: {must}, got {v}")
    for lo_name in [n for n in values if n.endswith("_min")]:
        hi_name = lo_name[: -len("_min")] + "_max"
        lo, hi = values.get(lo_name), values.get(hi_name)
        numbers = [x for x in (lo, hi) if number(x)]
        if len(numbers) == 2 and numbers[0] > numbers[1]:
            out.append(f"-p {lo_name} {lo} is above -p {hi_name} {hi}")
    return out


def _file_problems(values: Mapping[str, Any]) -> list[str]:
    """The input files' problems (other than the presets' and the routing's): not found."""
    from moeroof.core.paths import resolve_data

    out: list[str] = []
    for name, value in values.items():
        if name in ROUTING_PARAMETERS or name in ("model", "hardware") or not isinstance(value, str):
            continue
        text = value.strip()
        # an input data file by its suffix; a path without one may be something the run makes
        looks_like_file = text.lower().endswith(_FILE_SUFFIXES)
        if not text or not looks_like_file or "://" in text or name == "out" or name.startswith("out_"):
            continue
        try:
            path = resolve_data(text)
        except (ValueError, OSError) as err:
            out.append(f"-p {name}: {err}")
            continue
        if not path.exists():
            out.append(f"-p {name}: {text}: no such file")
    return out


def problems(values: Mapping[str, Any]) -> list[str]:
    """Every problem of one notebook's parameter values (defaults with the user's on top), each
    a short clause naming its parameter; empty when they can work together."""
    out: list[str] = []
    model = _preset_problems(values, out)
    out += filter(None, (_routing_problem(name, values.get(name), model) for name in ROUTING_PARAMETERS))
    return out + _number_problems(values) + _file_problems(values)


def values_of(declared: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A notebook's parameter values: its declared defaults (``report.declared_parameters``), the user's on top."""
    values = {name: _default(d.default) for name, d in declared.items()}
    values.update(given)
    return values


def check(notebook: str, declared: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """Raise :class:`PreflightError` naming the notebook and every problem of its parameters."""
    found = problems(values_of(declared, given))
    if found:
        raise PreflightError(f"{notebook}: " + "; ".join(found))
