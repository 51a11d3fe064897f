"""The ``moeroof`` subcommands' flag values: each flag's constraint, declared where the flag is added.

A number, size, choice or list flag is declared with one of the constraint classes below as its
argparse ``type`` (``p.add_argument("--steps", type=Count(min=1))``): argparse calls it on the text
given (and on a text default), and it returns the value or refuses the text with a
:class:`FlagError`, which :class:`FlagParser` prints as one line, ``error: --steps: '0' is not a
positive integer``, exit status 2, before the command runs. The constraints carry their bounds
as data (``Count(min=1, max=MAX_LAYERS).max``), so that ``tests/test_cli_flags.py`` derives the
values each flag must refuse and accept from the declarations themselves. A check that needs two
flags together (``--top-k`` against ``--experts``) or an input file stays in the command's
``run`` and raises :class:`UsageError` (``error: <message>``, exit 2 in :mod:`moeroof.cli.app`).

Building a parser imports no library code: this module needs :mod:`moeroof.core.limits` alone at
import time; a subcommand imports its library modules inside its own functions.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from moeroof.core.limits import MAX_BATCH, MAX_EXPERTS, MAX_GIB, MAX_LAYERS, MAX_REPLICATES, MAX_TOKENS

__all__ = [
    "READ_PATHS",
    "CACHE_POLICIES",
    "PARTITIONS",
    "UsageError",
    "flags_named",
    "FlagError",
    "FlagParser",
    "Count",
    "Real",
    "Bytes",
    "BatchList",
    "ListOf",
    "Choice",
    "CONSTRAINTS",
    "SEED",
    "REPLICATES",
    "EXPERTS",
    "TOP_K",
    "LAYERS",
    "TOKENS",
    "WORKERS",
    "GIB",
    "RANK_SPEED",
    "add_default",
    "add_seed",
    "add_read_arguments",
    "declare_choices",
    "start_cache_kernels",
    "check_replicate_memory",
    "MAX_BATCH_SIZES",
    "BATCH_HELP",
    "parse_batch",
    "add_step_arguments",
    "SET_HELP",
    "load_presets",
    "step_options",
    "resolve_auto_cache",
]


# How `calibrate` and `bench` bypass the page cache: moeroof.measure.calibrate.READ_PATHS, spelled
# out here so that building the parser imports no measurement code (tests check they agree).
READ_PATHS = ("auto", "o_direct", "fadvise")


# The step model's choices (moeroof.models.expert_cache.POLICIES, moeroof.models.plan.PARTITIONS),
# spelled out so that building the parser imports no model code (tests check they agree).
CACHE_POLICIES = ("lru", "lfu", "lfu-perfect", "s3fifo", "arc", "belady", "belady-insert", "static")
PARTITIONS = ("id", "lpt", "weighted", "bytes")

#: a usage error's exit status (moeroof.cli.app.EXIT_USAGE)
_EXIT_USAGE = 2


class UsageError(ValueError):
    """A bad flag value found by a command's ``run`` (two flags together, a flag against an
    input); printed as ``error: <message>``."""


class FlagError(argparse.ArgumentTypeError):
    """A flag value its declared constraint refuses; the message leaves out the flag, which
    :class:`FlagParser` puts in front (``error: --steps: '0' is not a positive integer``)."""


def _flag_label(argument_name: str | None) -> str:
    """``-o/--output`` → ``--output``: the long name of a flag, as every message spells it."""
    names = str(argument_name or "").split("/")
    return next((n for n in names if n.startswith("--")), names[0] or "argument")


class FlagParser(argparse.ArgumentParser):
    """The ``moeroof`` parsers (argparse makes every subparser of the same class): a value that a
    declared constraint refuses is one line, ``error: --flag: what is wrong``, and exit status 2;
    argparse's own usage errors (a missing argument, an unknown flag) keep its usage and message."""

    def error(self, message: str) -> NoReturn:
        exc = sys.exc_info()[1]
        # argparse raises its ArgumentError while it handles the constraint's FlagError
        if isinstance(exc, argparse.ArgumentError) and isinstance(exc.__context__, FlagError):
            self.exit(_EXIT_USAGE, f"error: {_flag_label(exc.argument_name)}: {exc.__context__}\n")
        super().error(message)


_DIGITS = re.compile(r"\+?[0-9]+")


@dataclass(frozen=True)
class Count:
    """A whole number in ``min`` … ``max`` (``max`` None: no upper bound), written in decimal
    digits (``1e3`` and ``1.0`` are refused). ``too_small``: the message for a number below
    ``min`` (``{text}`` the value as given), instead of "is not a positive integer"."""

    min: int = 0
    max: int | None = None
    too_small: str = ""

    def noun(self, plural: bool = False) -> str:
        """What the flag takes, in words: ``a positive integer`` (``positive integers``)."""
        if self.min in (0, 1):
            what = "non-negative integer" if self.min == 0 else "positive integer"
            return f"{what}s" if plural else f"a {what}"
        return f"integers >= {self.min}" if plural else f"an integer >= {self.min}"

    def __call__(self, text: str) -> int:
        t = text.strip()
        if not _DIGITS.fullmatch(t):
            raise FlagError(f"{text!r} is not {self.noun()}")
        try:
            n = int(t)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise FlagError(f"a number of {len(t)} digits is too large") from None
        if n < self.min:
            raise FlagError(self.too_small.format(text=text) if self.too_small else f"{text!r} is not {self.noun()}")
        if self.max is not None and n > self.max:
            raise FlagError(f"{n} is more than the {self.max} allowed")
        return n


@dataclass(frozen=True)
class Real:
    """A finite number from ``min`` (excluded with ``open_low``) to ``max`` (excluded with
    ``open_high``; ``inf``: no upper bound). ``unit`` names what a number above ``max`` is
    counted in (``1e+300 GiB is too large``); ``words`` are texts taken as they are (``auto``,
    any case); ``too_small``: the message for a finite number below ``min`` (``{text}`` the value
    as given)."""

    min: float = 0.0
    max: float = math.inf
    open_low: bool = False
    open_high: bool = False
    unit: str = ""
    words: tuple[str, ...] = ()
    too_small: str = ""

    def noun(self, plural: bool = False) -> str:
        """What the flag takes, in words: ``a number in (0, 1)``, ``a finite number >= 0``."""
        if math.isfinite(self.max) and not self.unit:
            low, high = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"{'numbers' if plural else 'a number'} in {low}{self.min:g}, {self.max:g}{high}"
        return f"{'finite numbers' if plural else 'a finite number'} {'>' if self.open_low else '>='} {self.min:g}"

    def below(self, value: float) -> bool:
        """Whether ``value`` lies below the range (NaN does)."""
        return not (value > self.min or (value == self.min and not self.open_low))

    def above(self, value: float) -> bool:
        """Whether ``value`` lies above the range."""
        return value > self.max or (value == self.max and self.open_high)

    def __call__(self, text: str) -> float | str:
        t = text.strip()
        if t.lower() in self.words:
            return t.lower()
        try:
            value = float(t)
        except ValueError:
            either = "".join(f" or {w}" for w in self.words)
            raise FlagError(f"expected a number{either}, got {text!r}") from None
        if math.isfinite(value) and self.below(value) and self.too_small:
            raise FlagError(self.too_small.format(text=text))
        if math.isfinite(value) and self.above(value) and self.unit:
            raise FlagError(f"{value:g} {self.unit} is too large (at most {self.max:g} {self.unit})")
        if not math.isfinite(value) or self.below(value) or self.above(value):
            raise FlagError(f"{text!r} is not {self.noun()}")
        return value


@dataclass(frozen=True)
class Bytes(Real):
    """A size in bytes: finite and at least 1 (``1e-300`` bytes per expert would make a capacity
    of 1 GiB hold 10^309 experts), at most :data:`~moeroof.core.limits.MAX_GIB` GiB."""

    min: float = 1.0
    max: float = MAX_GIB * 2**30
    unit: str = "B"
    too_small: str = "a size in bytes must be at least 1, got {text!r}"


@dataclass(frozen=True)
class ListOf:
    """Comma-separated values, each ``item`` (a :class:`Count` or :class:`Real`), as a list;
    ``distinct``: none twice. ``example`` shows the form in the message for a malformed list."""

    item: Count | Real
    example: str
    distinct: bool = False

    def __call__(self, text: str) -> list[Any]:
        parts = text.split(",")
        if not text.strip() or any(not q.strip() for q in parts):
            raise FlagError(f"expected comma-separated {self.item.noun(plural=True)} like {self.example}, got {text!r}")
        values = [self.item(q) for q in parts]
        twice = [v for i, v in enumerate(values) if v in values[:i]] if self.distinct else []
        if twice:
            raise FlagError(f"{twice[0]} is listed twice in {text!r}")
        return values


@dataclass(frozen=True)
class Choice:
    """One of ``options`` (``many``: a comma-separated list of them, duplicates dropped, as a
    tuple). A flag added with ``choices=`` gets a ``Choice`` of them from :func:`declare_choices`,
    so that a name not among them is one ``error:`` line too."""

    options: tuple[str, ...]
    many: bool = False

    def __call__(self, text: str) -> str | tuple[str, ...]:
        if not self.many:
            if text not in self.options:
                raise FlagError(f"{text!r} is not one of {', '.join(self.options)}")
            return text
        parts = [t.strip() for t in text.split(",")]
        if not text.strip() or any(t not in self.options for t in parts):
            raise FlagError(f"expected a comma-separated list from {','.join(self.options)}, got {text!r}")
        return tuple(dict.fromkeys(parts))


#: the most batch sizes one --batch may expand to
MAX_BATCH_SIZES = 10_000


@dataclass(frozen=True)
class BatchList:
    """``--batch``: batch sizes as :data:`BATCH_HELP` writes them (``1,8,64``, ``1-64``,
    ``1:256:x2``, ``1:64:+8``), each in 1 … ``max``, at most ``max_sizes`` of them; sorted,
    duplicates dropped."""

    max: int = MAX_BATCH
    max_sizes: int = MAX_BATCH_SIZES

    def __call__(self, text: str) -> list[int]:
        parts = text.split(",")
        if not text.strip() or any(not p.strip() for p in parts):
            raise FlagError(f"expected comma-separated batch sizes like 1,8,64, 1-64 or 1:256:x2, got {text!r}")
        sizes: set[int] = set()
        for part in parts:
            sizes.update(self._item(part))
            if len(sizes) > self.max_sizes:
                raise FlagError(f"{text!r} expands to more than {self.max_sizes} sizes")
        return sorted(sizes)

    def _size(self, text: str) -> int:
        return Count(min=1, max=self.max)(text)

    def _item(self, item: str) -> Iterable[int]:
        """One comma item (see :data:`BATCH_HELP`)."""
        text = item.strip()
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise FlagError(f"{item!r}: a range is LO:HI:xF (geometric) or LO:HI:+D (arithmetic)")
            lo, hi = self._span(item, parts[0], parts[1])
            return self._range(item, lo, hi, parts[2].strip())
        if "-" in text[1:]:
            lo_text, _, hi_text = text.partition("-")
            lo, hi = self._span(item, lo_text, hi_text)
            return {lo, hi} | {2**j for j in range(hi.bit_length()) if lo < 2**j < hi}
        return [self._size(text)]

    def _span(self, item: str, lo_text: str, hi_text: str) -> tuple[int, int]:
        lo, hi = self._size(lo_text), self._size(hi_text)
        if hi < lo:
            raise FlagError(f"{item!r}: HI = {hi} is below LO = {lo}")
        return lo, hi

    def _range(self, item: str, lo: int, hi: int, step: str) -> list[int]:
        """``LO:HI:xF`` (geometric) or ``LO:HI:+D`` (arithmetic), HI included when a step reaches it."""
        if step[:1] in ("x", "*", "×"):
            try:
                factor = float(step[1:])
            except ValueError:
                raise FlagError(f"{item!r}: the factor after 'x' must be a number, got {step[1:]!r}") from None
            if not math.isfinite(factor) or factor <= 1:
                raise FlagError(f"{item!r}: the factor must be > 1, got {step[1:]!r}")
            out: list[int] = []
            x = float(lo)
            for _ in range(self.max_sizes + 1):
                if round(x) > hi:
                    return out
                if not out or out[-1] != round(x):  # a factor near 1 rounds to the same size again
                    out.append(int(round(x)))
                x *= factor
            raise FlagError(f"{item!r} takes more than {self.max_sizes} steps (the factor is too close to 1)")
        if step[:1] == "+":
            try:
                d = Count(min=1)(step[1:])
            except FlagError as err:
                raise FlagError(f"{item!r}: the step after '+': {err}") from None
            count = (hi - lo) // d + 1
            if count > self.max_sizes:
                raise FlagError(f"{item!r} expands to {count} sizes (at most {self.max_sizes})")
            return list(range(lo, hi + 1, d))
        raise FlagError(f"{item!r}: the step must be xF (geometric, e.g. x2) or +D (arithmetic, e.g. +8), got {step!r}")


#: the constraint classes a flag's ``type`` may be (tests/test_cli_flags.py walks the parsers for them)
CONSTRAINTS = (Count, Real, ListOf, Choice, BatchList)

# The constraints several commands' flags share (the bounds: moeroof.core.limits).
#: a seed of numpy.random.default_rng
SEED = Count(min=0)
#: bootstrap replicates, draws, goodness-of-fit simulations (each also checked against memory)
REPLICATES = Count(min=0, max=MAX_REPLICATES)
#: routed experts per layer E
EXPERTS = Count(min=1, max=MAX_EXPERTS)
#: experts per token K (K <= E is checked where both are known)
TOP_K = Count(min=1, max=MAX_EXPERTS)
#: MoE layers L
LAYERS = Count(min=1, max=MAX_LAYERS)
#: routed tokens per layer T
TOKENS = Count(min=1, max=MAX_TOKENS)
#: worker processes of a local cluster
WORKERS = Count(min=1)
#: a cache or memory size in GiB
GIB = Real(min=0.0, max=MAX_GIB, unit="GiB")
#: relative speed per rank (one per rank: checked against --ranks where both are known)
RANK_SPEED = ListOf(Real(min=0.0, open_low=True), example="1,0.6")


def add_default(p: Any, flag: str, default: str, help: str, **kw: Any) -> None:
    """``p.add_argument(flag, default=default, **kw)`` with the default said once: its ``help``
    ends ``(default DEFAULT)``."""
    p.add_argument(flag, default=default, help=f"{help} (default {default})", **kw)


def add_seed(p: Any, what: str) -> None:
    """``--seed`` (default 0): the seed of ``what``."""
    add_default(p, "--seed", "0", f"seed of {what}", type=SEED)


def add_read_arguments(p: Any, scratch_help: str) -> None:
    """``--scratch-dir`` and ``--read-path``: where ``calibrate`` and ``bench`` put the file they
    read, and how the reads bypass the page cache."""
    p.add_argument("--scratch-dir", help=scratch_help)
    bypass = "bypass the page cache by O_DIRECT, fadvise, or auto (default)"
    p.add_argument("--read-path", default="auto", choices=READ_PATHS, help=bypass)


def declare_choices(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``parser`` and its subparsers added with ``choices=`` and no ``type``
    gets ``type=Choice(choices)``: a name not among them is one ``error:`` line, as any
    other bad value (argparse's own check would print its usage first)."""
    for action in parser._actions:  # argparse keeps its actions here and nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                declare_choices(sub)
        elif action.choices is not None and action.type is None:
            action.type = Choice(tuple(action.choices))


def start_cache_kernels() -> None:
    """Before ``cache`` / ``mrc`` simulate: load the C kernels (built at install), so that a
    missing or stale build is said before any input is read."""
    from moeroof.kernels import cache as cache_kernels

    cache_kernels.library()


def check_replicate_memory(flag: str, count: int, per_replicate: int, what: str) -> None:
    """Refuse ``flag``'s ``count`` replicates of ``per_replicate`` 8-byte entries (``what``
    names one replicate in the user's terms) when they would not fit in available memory."""
    from moeroof.core.limits import check_allocation

    try:
        check_allocation(int(count) * int(per_replicate), 8, f"{count} × {what}", limit=None)
    except ValueError as err:
        raise UsageError(f"{flag}: {err}") from None


BATCH_HELP = (
    "batch sizes: a list (1,8,64), a doubling span LO-HI (1-64 = 1,2,4,…,64: the powers of two between, "
    "LO and HI included; 3-20 = 3,4,8,16,20), a geometric range LO:HI:xF (1:256:x2 = 1,2,4,…,256) or an "
    "arithmetic one LO:HI:+D (1:64:+8 = 1,9,…,57); HI is included when the steps reach it; items mix (1,2,8:64:x2)"
)


def flags_named(err: Exception, flags: dict[str, str]) -> UsageError:
    """``err`` (a library error ``"name/name: what"``) as a :class:`UsageError` naming the flags the
    user typed for those parameters (``flags``: parameter → flag; a name without one stays)."""
    text = str(err)
    head, sep, rest = text.partition(": ")
    if not sep or not all(n.isidentifier() for n in head.split("/")):
        return UsageError(text)
    return UsageError("/".join(flags.get(n, n) for n in head.split("/")) + sep + rest)


def parse_batch(text: str) -> list[int]:
    """``--batch``'s text as :class:`BatchList` reads it: ``"1,8,64"`` → ``[1, 8, 64]``; ``"1-64"`` →
    powers of two from 1 to 64 (the ends included); ``"1:256:x2"`` geometric, ``"1:64:+8"``
    arithmetic (:data:`BATCH_HELP`). A bad text is a :class:`UsageError` naming ``--batch``."""
    try:
        return BatchList()(text)
    except FlagError as err:
        raise UsageError(f"--batch: {err}") from None


def add_step_arguments(p: Any) -> None:
    """The flags of the one step model that ``plan`` and ``split`` share, with the same defaults,
    so that the two commands given the same model, box, routing, cache and batch agree."""
    p.add_argument(
        "--cache-gib",
        default="auto",
        type=Real(min=0.0, max=MAX_GIB, unit="GiB", words=("auto",)),
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
    add_default(p, "--context", "4096", "context tokens per agent", type=Count(min=0))
    p.add_argument(
        "--overlap", default="max", choices=("max", "sum"), help="combine the terms by max (overlap) or sum (serial)"
    )
    p.add_argument(
        "--read-size-kib",
        type=Real(min=2**-10, max=MAX_GIB * 2**20, unit="KiB", too_small="a read of {text} KiB is less than one byte"),
        help="SSD read size in KiB (default: one expert per read)",
    )
    p.add_argument(
        "--exchange",
        default="overlapped",
        choices=("overlapped", "serial"),
        help="with several ranks: the expert exchange hidden under the slowest rank (default) or added after it",
    )
    add_seed(p, "the simulated cache traces")
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


def load_presets(args: Any) -> tuple[Any, Any]:
    """``--model`` and ``--hardware`` loaded, with each ``--set FIELD=VALUE`` (``model.FIELD`` /
    ``hardware.FIELD`` to be explicit) applied to the preset that has the field
    (:func:`moeroof.data.presets.with_overrides`)."""
    from moeroof.data.presets import HARDWARE_FIELDS, MODEL_FIELDS, load_hardware, load_model, with_overrides

    model, hardware = load_model(args.model), load_hardware(args.hardware)
    on_model: dict[str, str] = {}
    on_box: dict[str, str] = {}
    for item in args.set or ():
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
    """The shared step flags (their values as declared in :func:`add_step_arguments`) as
    :class:`moeroof.models.plan.Workload` keywords (SI units); ``cache_bytes`` is None for
    ``--cache-gib auto`` (:func:`resolve_auto_cache` fills it in)."""
    return {
        "cache_bytes": None if args.cache_gib == "auto" else args.cache_gib * 2**30,
        "cache_policy": args.cache_policy,
        "cache_scope": args.cache_scope,
        "context_tokens": args.context,
        "overlap": args.overlap,
        "read_size_bytes": None if args.read_size_kib is None else args.read_size_kib * 2**10,
        "fabric_overlapped": args.exchange == "overlapped",
        "seed": args.seed,
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
