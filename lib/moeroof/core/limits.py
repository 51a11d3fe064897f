"""Bounds checked before an array is made: sane sizes as named constants, and the memory this
machine has available (a sidecar asking for 10^12 experts, or a flag asking for 10^9
bootstrap replicates, must get one clear error, not a ``MemoryError`` deep inside numpy).

Every product here is a Python int (no int64 overflow: ``tokens = 2**62`` times K is exact).
"""

from __future__ import annotations

import json
import os
import re
import resource
from typing import Any, NoReturn

from moeroof.core.errors import ParameterError

__all__ = [
    "MAX_SKEW_FIT_EXPERTS",
    "MAX_SHARDS_SLICES",
    "MAX_INT_DIGITS",
    "bounded_int",
    "LongNumber",
    "LongNumberError",
    "parse_json",
    "parse_toml",
    "long_number_in",
    "unique_keys",
    "plain_value_error",
    "MAX_EXPERTS",
    "MAX_LAYERS",
    "MAX_TOKENS",
    "MAX_CELLS",
    "MAX_REPLICATES",
    "MAX_BOOTSTRAP_COUNTS",
    "AllocationError",
    "MAX_JSON_BYTES",
    "MAX_TOML_BYTES",
    "MAX_NESTING",
    "MAX_DRAWN_KEYS",
    "MAX_FIT_SEEDS",
    "MAX_SIMULATED_STEPS",
    "MAX_FIT_EXPERT_CELLS",
    "MAX_GIB",
    "MAX_BATCH",
    "TRACE_KEY_BYTES",
    "MAX_PRESET_BYTES",
    "MAX_PRESET_BYTES_PER_S",
    "MAX_PRESET_FLOP",
    "MAX_PRESET_FLOP_PER_S",
    "MAX_PRESET_SECONDS",
    "MAX_HIDDEN_SIZE",
    "MAX_PARAMS",
    "MAX_RECLAIM_PENALTY",
    "MAX_RECLAIM_EXPONENT",
    "FALLBACK_AVAILABLE_BYTES",
    "available_memory",
    "usable_cores",
    "check_allocation",
    "human_bytes",
    "nesting_depth",
    "check_document",
]

#: routed experts per MoE layer (published models: 8 … 384)
MAX_EXPERTS = 1 << 20
#: MoE layers (published models: 24 … 94)
MAX_LAYERS = 1 << 16
#: routed tokens per layer of a histogram; ``E·T`` then stays below 2^60 (int64 sums are exact)
MAX_TOKENS = 1 << 40
#: entries of one (layers × experts) or (tokens × K) array
MAX_CELLS = 1 << 32
#: bootstrap replicates, draws, goodness-of-fit simulations
MAX_REPLICATES = 1_000_000
#: counts one ``union`` run on a histogram draws and rarefies (bootstrap × layers × experts):
#: drawn a chunk at a time, they take time, not memory (10 to 20 ns a count on this 2-core box:
#: 2^31 in under a minute; the default 200 replicates of 2^20 experts draw 2^27.6)
MAX_BOOTSTRAP_COUNTS = 1 << 31
#: a JSON sidecar or meta string (the embedded ones are < 2 KiB)
MAX_JSON_BYTES = 16 << 20
#: a preset TOML (the embedded ones are < 4 KiB)
MAX_TOML_BYTES = 1 << 20
#: arrays and objects nested in a JSON or TOML document (the embedded ones: 3)
MAX_NESTING = 32
#: a POINTS file (fit-routing, fit-plan): every row is simulated or predicted, so its size is bounded
MAX_POINTS_BYTES = 4 << 20
MAX_POINTS_ROWS = 10_000
#: random-order keys a drawn cache trace sorts (steps × layer shapes × experts): 2^27 sort in
#: about 10 s; a 256-expert model at 16 layer shapes and 2500 steps draws 10^7
MAX_DRAWN_KEYS = 1 << 27
#: fit seeds of ``fit-routing`` (every seed simulates every row at every evaluated knob set)
MAX_FIT_SEEDS = 1024
#: steps of one simulated run (history plus counted steps) in ``fit-routing``
MAX_SIMULATED_STEPS = 1 << 20
#: experts × simulated layers of ``fit-routing``'s popularity (redrawn at every evaluation of a
#: fit that evaluates hundreds of knob sets): 2^16 is 4096 experts at 16 layers (published
#: models: 8 … 384), whose fit already runs for minutes
MAX_FIT_EXPERT_CELLS = 1 << 16
#: experts of a skew fit (``moeroof fit``): it tabulates each family's inclusion probabilities
#: over E experts at 41 exponents, so its time and memory grow with E (this 2-core box: 2 s at
#: 4,096, 11 s and 0.3 GB at 16,384; a 16 KB trace declaring 2^20 ran past a minute at 12 GB)
MAX_SKEW_FIT_EXPERTS = 1 << 14
#: SHARDS hash slices of ``mrc --slices`` (one task and one curve over every capacity each;
#: ``--slices 2^40`` grew past 12 GB building its edges): far above any cluster's workers
MAX_SHARDS_SLICES = 1 << 12
#: a cache or memory size in GiB (2^40 GiB = 1 ZiB): a larger one is a typo, and 1e300 GiB
#: overflows to infinity in bytes
MAX_GIB = float(1 << 40)
#: digits of an integer an input may spell (2^63 has 19): a count, size, id or seed never needs
#: more, and Python refuses to convert 4,301 or more in its own words ("Exceeds the limit …")
MAX_INT_DIGITS = 20
#: concurrent streams of a POINTS row (published serving batches: 1 … 10^4)
MAX_BATCH = 1 << 24
#: bytes a trace's (layer, expert) key costs the heaviest of the commands that read it (counts,
#: ranks, an item table and its copies), checked when the trace is read: measured on a 1 KB trace
#: of 100 layers declaring 2^20 experts (2-core VM, 2026-12-07), per key: union 8 B, mrc 11,
#: cache LRU 11, Belady 16, histogram 17, mrc --sample-rate 0.1 31, cache --policy static 33;
#: 65,536 such layers asked numpy for 512 GiB with no file named
TRACE_KEY_BYTES = 40
#: a preset's sizes in bytes (one expert, the dense band, a token's KV, a box's RAM, a read):
#: 2^50 B = 1 PiB, where the largest published model's experts are 2^40 B in all and a box's RAM
#: 2^41; an expert of 2^70 B gave ``plan`` exit 0 and a step of 10^14 s
MAX_PRESET_BYTES = 1 << 50
#: a preset's bandwidths (memory, SSD, link): 2^50 B/s (an H200's HBM reads 4.8 TB/s, about 2^42)
MAX_PRESET_BYTES_PER_S = 1 << 50
#: a preset's FLOP per token (2 × active parameters: about 2^40 for a trillion active): 2^60
MAX_PRESET_FLOP = 1 << 60
#: a box's FLOP/s: 2^70 (about 1.2·10^21; a rack of 72 GPUs is about 1.4·10^18 at FP4)
MAX_PRESET_FLOP_PER_S = 1 << 70
#: an engine's seconds per step, per agent token or per touched expert (published: micro- to
#: milliseconds): an hour
MAX_PRESET_SECONDS = 3600.0
#: a model's hidden size (published: 2,048 … 18,432)
MAX_HIDDEN_SIZE = 1 << 24
#: a model's parameter counts (published: at most about 2^41)
MAX_PARAMS = 1 << 50
#: the reclaim knobs of a box: κ (fitted values: below 10) and the exponent n ≥ 1 of its rise
MAX_RECLAIM_PENALTY = 1e6
MAX_RECLAIM_EXPONENT = 64.0
#: what :func:`available_memory` assumes when the system does not say
FALLBACK_AVAILABLE_BYTES = 4 << 30


def _num(n: int) -> str:
    """An int for a message: as is below 10^6, else 3 significant digits (``1e+12``)."""
    if abs(n) < 10**6:
        return str(n)
    if abs(n).bit_length() > 1000:
        return f"about 2^{abs(n).bit_length() - 1}"
    return f"{n:.3g}"


def human_bytes(n: int | float) -> str:
    """``8 TiB``, ``4.47 GiB``, ``512 B``: binary units, three significant digits."""
    if isinstance(n, int) and n.bit_length() > 1000:
        return f"about 2^{n.bit_length() - 1} B"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def _proc_kib(path: str, field: str) -> int | None:
    """The ``field`` of a /proc file that counts kB (``MemAvailable:``, ``VmSize:``), in bytes."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _sysconf_available() -> int | None:
    try:
        pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def _address_space_left() -> int | None:
    """What ``RLIMIT_AS`` (``ulimit -v``) leaves this process, where one is set."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - (_proc_kib("/proc/self/status", "VmSize:") or 0))


def available_memory() -> int:
    """Bytes this process could allocate now: ``MemAvailable`` of /proc/meminfo, else
    ``SC_AVPHYS_PAGES × SC_PAGE_SIZE``, else :data:`FALLBACK_AVAILABLE_BYTES`; lowered to what an
    address-space limit (``RLIMIT_AS``) leaves."""
    avail = _proc_kib("/proc/meminfo", "MemAvailable:")
    if avail is None:
        avail = _sysconf_available()
    left = _address_space_left()
    avail = FALLBACK_AVAILABLE_BYTES if avail is None else avail
    return avail if left is None else min(avail, left)


class AllocationError(ValueError):
    """An array refused by :func:`check_allocation` before it was allocated (its message says
    what and how much): a caller that knows which of the user's inputs sized it names that input."""


def _fail(message: str, parameter: str | None, error: type[ValueError] = ValueError) -> NoReturn:
    if parameter is None:
        raise error(message)
    raise ParameterError(parameter, message)


def check_allocation(
    n_items, itemsize: int, what: str, *, parameter: str | None = None, limit: int | None = MAX_CELLS
) -> int:
    """Refuse, before numpy is asked, an array of ``n_items`` entries of ``itemsize`` bytes that
    exceeds ``limit`` entries or the memory available now (:func:`available_memory`).

    ``what`` names the product in the user's terms (``"experts × layers"``); the error reads
    e.g. ``experts × layers = 1e+12 entries would need 7.28 TiB; this machine has 3.1 GiB
    available`` — an :class:`AllocationError` (a ValueError), or a :class:`ParameterError` naming ``parameter``.
    Products are Python ints, so nothing overflows. Returns the bytes.
    """
    n = int(n_items)
    need = n * int(itemsize)
    if n < 0:
        _fail(f"{what} = {n} entries is negative", parameter)
    if limit is not None and n > limit:
        have = f"at most {_num(limit)} entries are allowed"
    elif need > (avail := available_memory()):
        have = f"this machine has {human_bytes(avail)} available"
    else:
        return need
    _fail(f"{what} = {_num(n)} entries would need {human_bytes(need)}; {have}", parameter, AllocationError)


def nesting_depth(text: str, *, toml: bool = False) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (and, for TOML, comments): a linear
    scan, no recursion, so a 10^6-deep list is measured before a parser recurses into it.

    JSON strings are ``"…"`` with backslash escapes; TOML adds ``'…'`` literal strings and ``#``
    comments. Multi-line TOML strings toggle three times per delimiter and so come out right. In
    TOML a dotted key nests tables too (``a.b.c = 1`` is three deep; ``[a.b]`` counts three, its
    bracket included): each dot of a key (before its ``=``, or in a table header) counts one
    level, so a key of 500,000 dots,
    which tomllib takes minutes to build, is measured here first.
    """
    scan = _NestingScan(toml)
    for ch in text:
        scan.feed(ch)
    return scan.deepest


class _NestingScan:
    """The state of :func:`nesting_depth`'s scan, fed one character at a time."""

    def __init__(self, toml: bool) -> None:
        self.toml = toml
        self.deepest = 0
        self.quote = ""
        self.escaped = False
        self.comment = False
        self.opened: list[tuple[str, int]] = []  # the open brackets and their depth, innermost last
        self.in_key = toml  # TOML: reading a key (line start, or after { or , in an inline table)
        self.dots = 0  # dots of the key being read
        self.value_at = 0  # the depth a value of this key starts below (its key's tables)
        self.table_at = 0  # the depth of the table the last [header] opened
        self.header = False

    def feed(self, ch: str) -> None:
        if self._skipped(ch):
            return
        here = self.opened[-1][1] if self.opened else self.table_at
        if ch == '"' or (self.toml and ch == "'"):
            self.quote = ch
        elif self.toml and ch == "#":
            self.comment = True
        elif ch in "[{":
            self._open(ch, here)
        elif ch in "]}":
            if self.opened:
                self.opened.pop()
        elif self.toml:
            self._key(ch, here)

    def _skipped(self, ch: str) -> bool:
        """Whether ``ch`` is inside a string or a comment (a comment's newline ends it, and counts)."""
        if self.comment:
            self.comment = ch != "\n"
            return self.comment
        if not self.quote:
            return False
        if self.escaped:
            self.escaped = False
        elif ch == "\\" and self.quote == '"':
            self.escaped = True
        elif ch == self.quote:
            self.quote = ""
        return True

    def _open(self, ch: str, here: int) -> None:
        if self.in_key and not self.opened and ch == "[":  # a [table] header: its path starts at the top
            self.header, here = True, 0
        level = max(here, self.value_at if not self.in_key else 0) + 1
        self.opened.append((ch, level))
        self.deepest = max(self.deepest, level)
        if ch == "{":
            self.in_key, self.dots, self.value_at = True, 0, level

    def _key(self, ch: str, here: int) -> None:
        """TOML's keys: a line's (or an inline table's) dots before its ``=``, a header's path."""
        if ch == "\n" and not self.opened:
            self.table_at = self.dots + 1 if self.header else self.table_at
            self.in_key, self.dots, self.value_at, self.header = True, 0, self.table_at, False
        elif ch == "=":
            self.in_key, self.value_at = False, here + self.dots
        elif ch == "," and self.opened and self.opened[-1][0] == "{":
            self.in_key, self.dots, self.value_at = True, 0, here
        elif ch == "." and self.in_key:
            self.dots += 1
            self.deepest = max(self.deepest, here + self.dots + 1)


def check_document(text: str, what: str, *, max_bytes: int, toml: bool = False) -> None:
    """Refuse a JSON or TOML text longer than ``max_bytes`` characters or nested deeper than
    :data:`MAX_NESTING` (``json.loads`` of a 10^6-deep list raises RecursionError), before it is
    parsed. Raises ValueError in the user's terms."""
    if len(text) > max_bytes:
        raise ValueError(f"{what} is {human_bytes(len(text))}, more than the {human_bytes(max_bytes)} allowed")
    depth = nesting_depth(text, toml=toml)
    if depth > MAX_NESTING:
        raise ValueError(f"{what} nests arrays or tables {depth} deep, more than the {MAX_NESTING} allowed")


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the platform tells it (a
    ``taskset`` or a container's cpuset), else ``os.cpu_count()``, at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def bounded_int(text: str) -> int:
    """``int(text)`` for a number an input spells (``json.loads``'s ``parse_int``), refusing one of
    more than :data:`MAX_INT_DIGITS` digits with a ValueError in the user's terms."""
    digits = len(text.lstrip("+-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"a number of {digits} digits: no count, size or id needs more than {MAX_INT_DIGITS}")
    return int(text)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members as a dict (``json.loads``'s ``object_pairs_hook``), refusing a key
    given twice with a ValueError: ``json`` keeps the last silently, so ``{"experts": 8, …,
    "experts": 16}`` would be read as one of two answers the file gives."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice in one object: which value is meant is ambiguous")
        out[key] = value
    return out


#: Python's refusal of an integer of 4,301 or more digits, wherever in a message it stands
_PYTHON_DIGIT_LIMIT = re.compile(
    r"Exceeds the limit \(\d+ digits\) for integer string conversion[^;]*(; use sys\.set_int_max_str_digits\(\) "
    r"to increase the limit)?"
)


def plain_value_error(err: BaseException) -> str:
    """``str(err)``, but Python's refusal of an integer of 4,301 or more digits ("Exceeds the limit
    (4300 digits) for integer string conversion …: use sys.set_int_max_str_digits()") said in the
    user's terms, and only those words replaced: a message that named the file and field before
    them (``grid.toml: …``) still does."""
    words = f"a number of more than 4,300 digits: no count, size or id needs more than {MAX_INT_DIGITS}"
    return _PYTHON_DIGIT_LIMIT.sub(words, str(err))


class LongNumberError(ValueError):
    """An integer of more than :data:`MAX_INT_DIGITS` digits in a JSON, TOML or YAML document,
    with where it stands: ``key`` (``tokens``, ``knobs.skew``, ``fixed.experts``, ``tokens[2]``)
    and, where the text tells it, ``line`` (1-based). ``str(err)`` says what is wrong; the reader
    names its file with the key."""

    def __init__(self, key: str, digits: int | None, line: int | None = None, detail: str | None = None) -> None:
        self.key, self.digits, self.line = key, digits, line
        size = f"a number of {digits} digits" if digits is not None else "a number of more than 4,300 digits"
        super().__init__(detail or f"{size}: no count, size or id needs more than {MAX_INT_DIGITS}")


class LongNumber(str):
    """The text of an integer too long to be a count, size or id, kept while a document is
    parsed so that its key can be named once parsing ends."""


def _int_or_long(text: str) -> int | LongNumber:
    """``json.loads``'s ``parse_int``: an int, or a :class:`LongNumber` past :data:`MAX_INT_DIGITS`."""
    if len(text.lstrip("+-")) > MAX_INT_DIGITS:
        return LongNumber(text)
    return int(text)


def _digits(value: Any) -> int | None:
    """How many digits ``value`` spells when it is too long to be a count (None otherwise)."""
    if isinstance(value, LongNumber):
        return len(re.sub(r"[^0-9a-fA-F]", "", value.lstrip("+-").removeprefix("0x").removeprefix("0o")))
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 66:
        return len(str(abs(value))) if abs(value).bit_length() < 14_000 else None  # 4,300 digits: about 2^14,284
    return None


def _too_long(value: int, limit: int | None) -> bool:
    if isinstance(value, bool):
        return False
    if limit is not None:
        return not -limit <= value < limit
    return abs(value).bit_length() > 60 and len(str(abs(value))) > MAX_INT_DIGITS


def long_number_in(doc: Any, limit: int | None = None) -> tuple[str, int | None] | None:
    """The first integer in ``doc`` (nested dicts and lists) too long to be a count, size or id —
    a :class:`LongNumber`, or an int of more than :data:`MAX_INT_DIGITS` digits (with ``limit``:
    an int outside ``-limit … limit - 1``) — as (its key path, its digits); None when there is
    none. Iterative: no recursion over a deep document."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, LongNumber) or (isinstance(value, int) and _too_long(value, limit)):
            return where or "value", _digits(value)
    return None


def parse_json(text: str) -> Any:
    """``json.loads(text)`` as every input the suite reads is parsed: a key given twice refused
    (:func:`unique_keys`) and an integer of more than :data:`MAX_INT_DIGITS` digits refused with
    its key (:class:`LongNumberError`: ``bounded_int`` as ``parse_int`` knew the digits, not the
    key: ``"tokens": 10…0`` said ``file``)."""
    doc = json.loads(text, parse_int=_int_or_long, object_pairs_hook=unique_keys)
    if (found := long_number_in(doc)) is not None:
        raise LongNumberError(*found)
    return doc


def parse_toml(text: str, *, bounded: bool = True) -> dict[str, Any]:
    """``tomllib.loads(text)``, refusing an integer of more than 4,300 digits with its key and line
    (:class:`LongNumberError`: tomllib raised Python's own refusal with no key) and, ``bounded``,
    one of more than :data:`MAX_INT_DIGITS` digits or outside TOML's 64-bit integers (tomllib
    takes 2^70 without a word, which a sweep then failed on as "a number is too large to compute
    with", naming nothing). A reader that bounds each field itself (presets) passes
    ``bounded=False``. Raises ``tomllib.TOMLDecodeError`` for text that is not TOML."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except ValueError as err:  # Python's refusal of 4,301 or more digits, from inside tomllib
        if isinstance(err, tomllib.TOMLDecodeError) or _PYTHON_DIGIT_LIMIT.search(str(err)) is None:
            raise
        raise _long_toml_number(text) from None
    if bounded and (found := long_number_in(doc)) is not None:
        raise LongNumberError(*found, _toml_line_of(text, 10**MAX_INT_DIGITS))
    if bounded and (found := long_number_in(doc, limit=1 << 63)) is not None:
        # 19 or 20 digits past int64: TOML's integers are 64-bit
        detail = "is outside the 64-bit integers TOML allows (-2^63 … 2^63 - 1)"
        raise LongNumberError(found[0], None, _toml_line_of(text, 1 << 63), detail)
    return doc


#: a TOML integer of more than 4,300 digits (underscores allowed between digits)
_HUGE_DIGITS = re.compile(r"[0-9](?:_?[0-9]){4300,}")


def _long_toml_number(text: str) -> LongNumberError:
    """Where in ``text`` the integer tomllib could not convert stands: its line, and the key of
    that line below its table's header (``fixed.experts``)."""
    m = _HUGE_DIGITS.search(text)
    if m is None:
        return LongNumberError("toml", None)
    line = text.count("\n", 0, m.start()) + 1
    lines = text.splitlines()
    key_m = re.match(r"\s*([^=#\[\s][^=#]*?)\s*=", lines[line - 1])
    key = key_m.group(1).strip().strip("\"'") if key_m else "toml"
    for prev in reversed(lines[: line - 1]):
        head = re.match(r"\s*\[+\s*([^\]]+?)\s*\]", prev)
        if head and key_m:
            key = f"{head.group(1).strip()}.{key}"
            break
    return LongNumberError(key, len(m.group(0).replace("_", "")), line)


def _toml_line_of(text: str, beyond: int) -> int | None:
    """The line of the first integer in ``text`` whose magnitude is ``beyond`` or more (a hint for
    the message; None when none is found, as for one written in hex)."""
    for m in re.finditer(r"(?<![\w.'\"])[+-]?[0-9](?:_?[0-9]){18,}(?![\w.'\"])", text):
        if abs(int(m.group(0).replace("_", "")[:4400])) >= beyond:
            return text.count("\n", 0, m.start()) + 1
    return None
