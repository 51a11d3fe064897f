"""The ``moeroof`` subcommands' flag values: the usage error and the parsers.

Every flag value arrives as text and is parsed here, so that a bad value reads
``error: --flag: what is wrong`` (:class:`UsageError`, exit 2 in :mod:`moeroof.cli.app`).
This module imports only numpy and :mod:`moeroof.data.io`; a subcommand imports its library
modules inside its own functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "READ_PATHS",
    "CACHE_POLICIES",
    "PARTITIONS",
    "UsageError",
    "start_cache_kernels",
    "positive_int",
    "non_negative_int",
    "non_negative_float",
    "positive_float",
    "replicates",
    "check_replicate_memory",
    "byte_size",
    "scaled",
    "MAX_BATCH_SIZES",
    "BATCH_HELP",
    "parse_batch",
    "add_step_arguments",
    "SET_HELP",
    "apply_sets",
    "step_options",
    "resolve_auto_cache",
    "parse_rank_speed",
]


# How `calibrate` and `bench` bypass the page cache: moeroof.measure.calibrate.READ_PATHS, spelled
# out here so that building the parser imports no measurement code (tests check they agree).
READ_PATHS = ("auto", "o_direct", "fadvise")


# The step model's choices (moeroof.models.expert_cache.POLICIES, moeroof.models.plan.PARTITIONS),
# spelled out so that building the parser imports no model code (tests check they agree).
CACHE_POLICIES = ("lru", "lfu", "lfu-perfect", "s3fifo", "arc", "belady", "belady-insert", "static")
PARTITIONS = ("id", "lpt", "weighted", "bytes")


class UsageError(ValueError):
    """A bad flag value; printed as ``error: <message>``."""


def start_cache_kernels() -> None:
    """Before ``cache`` / ``mrc`` simulate: load the C kernels (built at install), so that a
    missing or stale build is said before any input is read."""
    from moeroof.kernels import cache as cache_kernels

    cache_kernels.library()


def positive_int(text: str, flag: str) -> int:
    t = text.strip()
    if not t.lstrip("+").isdigit() or int(t) < 1:
        raise UsageError(f"{flag}: {text!r} is not a positive integer")
    return int(t)


def non_negative_int(text: str, flag: str) -> int:
    t = text.strip()
    if not t.lstrip("+").isdigit():
        raise UsageError(f"{flag}: {text!r} is not a non-negative integer")
    return int(t)


def non_negative_float(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag}: must be a finite number >= 0, got {text!r}")
    return value


def positive_float(text: str, flag: str) -> float:
    value = non_negative_float(text, flag)
    if value <= 0:
        raise UsageError(f"{flag}: must be > 0, got {text!r}")
    return value


def replicates(text: str, flag: str) -> int:
    """A count of replicates, draws or simulations: an integer in 0 … MAX_REPLICATES."""
    from moeroof.core.limits import MAX_REPLICATES

    n = non_negative_int(text, flag)
    if n > MAX_REPLICATES:
        raise UsageError(f"{flag}: {n} is more than the {MAX_REPLICATES} allowed")
    return n


def check_replicate_memory(flag: str, count: int, per_replicate: int, what: str) -> None:
    """Refuse ``flag``'s ``count`` replicates of ``per_replicate`` 8-byte entries (``what``
    names one replicate in the user's terms) when they would not fit in available memory."""
    from moeroof.core.limits import check_allocation

    try:
        check_allocation(int(count) * int(per_replicate), 8, f"{count} × {what}", limit=None)
    except ValueError as err:
        raise UsageError(f"{flag}: {err}") from None


def byte_size(text: str, flag: str) -> float:
    """A size in bytes: finite and at least 1 (``1e-300`` bytes per expert would make a
    capacity of 1 GiB hold 10^309 experts)."""
    value = non_negative_float(text, flag)
    if value < 1:
        raise UsageError(f"{flag}: a size in bytes must be at least 1, got {text!r}")
    return value


def scaled(value: float, factor: float, flag: str, unit: str) -> float:
    """``value × factor`` (a unit conversion of a flag's value), refused when it overflows."""
    out = value * factor
    if not math.isfinite(out):
        raise UsageError(f"{flag}: {value:g} {unit} is too large to compute with")
    return out


#: the most batch sizes one --batch may expand to
MAX_BATCH_SIZES = 10_000

BATCH_HELP = (
    "batch sizes: a list (1,8,64), a doubling span LO-HI (1-64 = 1,2,4,…,64: the powers of two between, "
    "LO and HI included; 3-20 = 3,4,8,16,20), a geometric range LO:HI:xF (1:256:x2 = 1,2,4,…,256) or an "
    "arithmetic one LO:HI:+D (1:64:+8 = 1,9,…,57); HI is included when the steps reach it; items mix (1,2,8:64:x2)"
)


def _batch_item(item: str) -> list[int]:
    """One comma item of ``--batch`` (see :data:`BATCH_HELP`)."""
    text = item.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise UsageError(f"--batch: {item!r}: a range is LO:HI:xF (geometric) or LO:HI:+D (arithmetic)")
        lo = positive_int(parts[0], "--batch")
        hi = positive_int(parts[1], "--batch")
        if hi < lo:
            raise UsageError(f"--batch: {item!r}: HI = {hi} is below LO = {lo}")
        step = parts[2].strip()
        if step[:1] in ("x", "*", "×"):
            try:
                factor = float(step[1:])
            except ValueError:
                raise UsageError(
                    f"--batch: {item!r}: the factor after 'x' must be a number, got {step[1:]!r}"
                ) from None
            if not math.isfinite(factor) or factor <= 1:
                raise UsageError(f"--batch: {item!r}: the factor must be > 1, got {step[1:]!r}")
            out, x = [], float(lo)
            while round(x) <= hi:
                out.append(int(round(x)))
                if len(out) > MAX_BATCH_SIZES:
                    break
                x *= factor
            return out
        if step[:1] == "+":
            d = positive_int(step[1:], "--batch (the step after '+')")
            count = (hi - lo) // d + 1
            if count > MAX_BATCH_SIZES:
                raise UsageError(f"--batch: {item!r} expands to {count} sizes (at most {MAX_BATCH_SIZES})")
            return list(range(lo, hi + 1, d))
        raise UsageError(
            f"--batch: {item!r}: the step must be xF (geometric, e.g. x2) or +D (arithmetic, e.g. +8), got {step!r}"
        )
    if "-" in text[1:]:
        lo_text, _, hi_text = text.partition("-")
        lo = positive_int(lo_text, "--batch")
        hi = positive_int(hi_text, "--batch")
        if hi < lo:
            raise UsageError(f"--batch: {item!r}: HI = {hi} is below LO = {lo}")
        span = {lo, hi}
        p = 1
        while p < hi:
            if p > lo:
                span.add(p)
            p *= 2
        return sorted(span)
    return [positive_int(text, "--batch")]


def parse_batch(text: str) -> list[int]:
    """``--batch``: ``"1,8,64"`` → ``[1, 8, 64]``; ``"1-64"`` → powers of two from 1 to 64 (the
    ends included); ``"1:256:x2"`` geometric, ``"1:64:+8"`` arithmetic (:data:`BATCH_HELP`).
    Sorted, duplicates dropped; positive integers only."""
    parts = text.split(",")
    if not text.strip() or any(not p.strip() for p in parts):
        raise UsageError(f"--batch: expected comma-separated batch sizes like 1,8,64, 1-64 or 1:256:x2, got {text!r}")
    sizes: set[int] = set()
    for part in parts:
        sizes.update(_batch_item(part))
        if len(sizes) > MAX_BATCH_SIZES:
            raise UsageError(f"--batch: {text!r} expands to more than {MAX_BATCH_SIZES} sizes")
    return sorted(sizes)


def add_step_arguments(p: Any) -> None:
    """The flags of the one step model that ``plan`` and ``split`` share, with the same defaults,
    so that the two commands given the same model, box, routing, cache and batch agree."""
    p.add_argument(
        "--cache-gib",
        default="auto",
        help="expert cache per rank (box) in GiB, or auto (the default): at each batch size B, what RAM leaves "
        "after the OS reserve, the dense band and the KV cache of that B",
    )
    p.add_argument(
        "--cache-policy",
        default="lru",
        choices=CACHE_POLICIES,
        help="the cache the step sees: a policy simulated in steady state on a trace drawn from the routing "
        "(default lru), or static: a hot set pinned from the true routing probabilities (an oracle)",
    )
    p.add_argument(
        "--cache-scope",
        default="global",
        choices=("global", "layer"),
        help="one cache shared by the layers (default) or one per layer",
    )
    p.add_argument("--context", default="4096", help="context tokens per agent (default 4096)")
    p.add_argument(
        "--overlap", default="max", choices=("max", "sum"), help="combine the terms by max (overlap) or sum (serial)"
    )
    p.add_argument("--read-size-kib", default=None, help="SSD read size in KiB (default: one expert per read)")
    p.add_argument(
        "--exchange",
        default="overlapped",
        choices=("overlapped", "serial"),
        help="with several ranks: the expert exchange hidden under the slowest rank (default) or added after it",
    )
    p.add_argument("--seed", default="0", help="seed of the simulated cache traces (default 0)")
    p.add_argument(
        "--page-cache",
        action="store_true",
        help="experts are read through the OS page cache (buffered reads, mmap), which gets what RAM leaves "
        "after the expert cache: a larger expert cache can then make a step slower (default: O_DIRECT reads)",
    )


SET_HELP = (
    "override a preset field for this run, FIELD=VALUE with its unit (repeatable): ram_bytes=64GB, "
    "bw_ssd_bytes_per_s=7GB/s (the curve scaled to that peak), os_reserve_bytes=6GiB, "
    "engine_seconds_per_step=2ms, kv_bytes_per_token=64KiB; the field is then assumed in provenance "
    "(moeroof presets --schema lists the fields)"
)


def apply_sets(items: Sequence[str] | None, model: Any, hardware: Any) -> tuple[Any, Any]:
    """``--set FIELD=VALUE`` (``model.FIELD`` / ``hardware.FIELD`` to be explicit): each override
    applied to the preset that has the field (:func:`moeroof.data.presets.with_overrides`)."""
    from moeroof.data.presets import HARDWARE_FIELDS, MODEL_FIELDS, with_overrides

    on_model: dict[str, str] = {}
    on_box: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UsageError(f"--set {item!r}: expected FIELD=VALUE, e.g. ram_bytes=64GB")
        kind, _, name = key.rpartition(".")
        if kind not in ("", "model", "hardware"):
            raise UsageError(f"--set {item!r}: {kind!r} is neither model nor hardware")
        if name in MODEL_FIELDS and kind in ("", "model"):
            on_model[name] = value.strip()
        elif name in HARDWARE_FIELDS and kind in ("", "hardware"):
            on_box[name] = value.strip()
        else:
            known = ", ".join([*MODEL_FIELDS, *HARDWARE_FIELDS])
            raise UsageError(f"--set {item!r}: no preset field {name!r} (fields: {known})")
    try:
        return with_overrides(model, on_model), with_overrides(hardware, on_box)
    except ValueError as err:
        raise UsageError(f"--set {err}") from None


def step_options(args: Any) -> dict[str, Any]:
    """The shared step flags as :class:`moeroof.models.plan.Workload` keywords (SI units);
    ``cache_bytes`` is None for ``--cache-gib auto`` (:func:`resolve_auto_cache` fills it in)."""
    auto = str(args.cache_gib).strip().lower() == "auto"
    cache_gib = None if auto else non_negative_float(args.cache_gib, "--cache-gib")
    read_kib = None if args.read_size_kib is None else positive_float(args.read_size_kib, "--read-size-kib")
    if read_kib is not None and read_kib * 2**10 < 1:
        raise UsageError(f"--read-size-kib: a read of {read_kib:g} KiB is less than one byte")
    return {
        "cache_bytes": None if cache_gib is None else scaled(cache_gib, 2**30, "--cache-gib", "GiB"),
        "cache_policy": args.cache_policy,
        "cache_scope": args.cache_scope,
        "context_tokens": non_negative_int(args.context, "--context"),
        "overlap": args.overlap,
        "read_size_bytes": None if read_kib is None else read_kib * 2**10,
        "fabric_overlapped": args.exchange == "overlapped",
        "seed": non_negative_int(args.seed, "--seed"),
        "page_cache": bool(args.page_cache),
    }


def resolve_auto_cache(options: dict[str, Any], model: Any, hardware: Any, batch: Any) -> dict[str, Any] | None:
    """Fill in ``--cache-gib auto`` (``options["cache_bytes"] is None``): each batch size gets what
    RAM leaves at that B (:func:`moeroof.models.plan.auto_cache`; ``cache_auto`` in the options,
    and with one B its number in ``cache_bytes`` as well). Returns what it chose and why
    (``note`` says it in words), or None when the user gave a number."""
    if options["cache_bytes"] is not None:
        return None
    from moeroof.models.plan import auto_cache, auto_cache_note

    auto = auto_cache(model, hardware, batch, context_tokens=options["context_tokens"])
    options["cache_bytes"] = auto["cache_bytes"][0] if len(auto["cache_bytes"]) == 1 else 0.0
    options["cache_auto"] = True
    return {**auto, "cache_gib": [c / 2**30 for c in auto["cache_bytes"]], "note": auto_cache_note(auto)}


def parse_rank_speed(text: str | None, ranks: int) -> tuple[float, ...] | None:
    """``--rank-speed 1,0.6``: one positive number per rank (None when not given)."""
    if text is None:
        return None
    from moeroof.core.errors import ParameterError
    from moeroof.models.partition import parse_rank_speed as parse

    try:
        return tuple(float(x) for x in parse(text, ranks))
    except ParameterError as err:
        raise UsageError(f"--rank-speed: {err.detail}") from None
