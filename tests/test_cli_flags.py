"""Every flag's declared constraint (moeroof.cli.flags: ``type=Count(min=1)``, ``Real``,
``Bytes``, ``BatchList``, ``ListOf``, ``Choice``; ``choices=`` becomes a ``Choice``) holds on the
command line: the values it must refuse and the boundary values it must take are derived from
the declaration itself, for every flag of every command, by walking the parser.

A refused value ends ``moeroof`` with exit status 2 and one line, ``error: --flag: …``, before the
command runs (the tests make running it an assertion failure); a boundary value parses to what
the constraint makes of it. Only parsing is exercised: no command runs, no file is read. A
numeric flag without a declaration fails :func:`test_every_numeric_flag_declares_a_constraint`,
so a new flag cannot skip it.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest

from moeroof.cli import app
from moeroof.cli.flags import CONSTRAINTS, BatchList, Bytes, Choice, Count, ListOf, Real
from moeroof.core import limits

# ----------------------------------------------------------------------------- the declarations


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(command path, its parser)`` of every command and subcommand, depth first."""
    for action in parser._actions:  # argparse keeps its subparsers here and nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


PARSER = app.build_parser()
COMMANDS = list(_commands(PARSER))


def _declared() -> Iterator[tuple[tuple[str, ...], Any, argparse.Action]]:
    """``(command path, parser, action)`` of every argument whose type is a constraint."""
    for path, parser in COMMANDS:
        for action in parser._actions:
            if isinstance(action.type, CONSTRAINTS):
                yield path, parser, action


DECLARED = list(_declared())


def _label(action: argparse.Action) -> str:
    """The flag as error lines name it: its long option, or the positional's name."""
    longs = [s for s in action.option_strings if s.startswith("--")]
    return longs[0] if longs else (action.option_strings or [action.metavar or action.dest])[0]


# ----------------------------------------------------------------------------- values from a declaration


def _g(x: float) -> str:
    """A float as text that reads back as the same float."""
    return repr(float(x))


def _refused(c: Any) -> list[str]:
    """Texts the constraint ``c`` must refuse, derived from its bounds."""
    if isinstance(c, Count):
        out = ["", " ", "x", "1.5", "1e3", "0x10", "nan", "inf", "1_000", str(c.min - 1), "-1", "9" * 5000]
        return out + ([str(c.max + 1), str(c.max * 10)] if c.max is not None else [])
    if isinstance(c, Real):
        out = ["", "x", "nan", "-nan", "inf", "-inf", "1e999", "-1e999", _g(c.min - max(1.0, abs(c.min)))]
        out.append(_g(c.min) if c.open_low else _g(math.nextafter(c.min, -math.inf)))
        if math.isfinite(c.max):
            out += [_g(c.max) if c.open_high else _g(math.nextafter(c.max, math.inf)), _g(c.max * 2)]
        return out + [f"{w}x" for w in c.words]
    if isinstance(c, BatchList):
        many, near = f"1:{c.max_sizes + 1}:+1", "1:100:x1.0000001"  # too many sizes, too many steps
        out = ["", ",", "1,", "1,,2", "0", "-1", "x", "1.5", "1e3", str(c.max + 1), f"1-{c.max + 1}", many, near]
        return out + ["1:8", "1:8:x1", "1:8:xq", "1:8:+0", "1:8:y2", "8-1", "0-4", f"1:{c.max + 1}:x2"]
    if isinstance(c, ListOf):
        first = _taken(c.item)[0][0]
        bad = [t for t in _refused(c.item) if t.strip() and "," not in t]
        out = ["", ",", f"{first},", f"{first},,{first}", *bad, *(f"{first},{t}" for t in bad)]
        return out + ([f"{first},{first}"] if c.distinct else [])
    if isinstance(c, Choice):
        first = c.options[0]
        if c.many:  # the names of a list may have spaces around them
            return ["", "nope", ",", f"{first},", f"{first},nope", f"{first},,{first}", first.upper() + "x"]
        return ["", "nope", f" {first}", f"{first},{first}", first.upper() + "x"]
    raise AssertionError(f"no refused values for {c!r}")


def _taken(c: Any) -> list[tuple[str, Any]]:
    """``(text, value)``: boundary texts the constraint ``c`` must take, and what it makes of them."""
    if isinstance(c, Count):
        out = [(str(c.min), c.min), (f" +{c.min} ", c.min)]
        return out + ([(str(c.max), c.max)] if c.max is not None else [(str(10**30), 10**30)])
    if isinstance(c, Real):
        low = c.min if not c.open_low else math.nextafter(c.min, math.inf)
        high = (c.max if not c.open_high else math.nextafter(c.max, -math.inf)) if math.isfinite(c.max) else 1e300
        return [(_g(low), low), (_g(high), high), *((w.upper(), w) for w in c.words)]
    if isinstance(c, BatchList):
        return [
            ("1", [1]),
            (str(c.max), [c.max]),
            ("64,8,1,8", [1, 8, 64]),
            ("3-20", [3, 4, 8, 16, 20]),
            ("1:256:x2", [2**i for i in range(9)]),
            ("1:64:+8", list(range(1, 65, 8))),
            (f"1:{c.max_sizes}:+1", list(range(1, c.max_sizes + 1))),
        ]
    if isinstance(c, ListOf):
        (a, va), (b, vb) = _taken(c.item)[0], _taken(c.item)[-1]
        return [(a, [va]), (f"{a},{b}", [va, vb])]
    if isinstance(c, Choice):
        if c.many:
            return [*((o, (o,)) for o in c.options), (",".join(c.options), tuple(c.options))]
        return [(o, o) for o in c.options]
    raise AssertionError(f"no taken values for {c!r}")


# ----------------------------------------------------------------------------- argv around one flag


def _filler(action: argparse.Action) -> list[str]:
    """Texts that satisfy a required argument (nothing is read: only parsed)."""
    n = action.nargs if isinstance(action.nargs, int) else 1
    text = _taken(action.type)[0][0] if isinstance(action.type, CONSTRAINTS) else "x"
    return [text] * n


def _argv(path: tuple[str, ...], parser: Any, action: argparse.Action, text: str) -> list[str]:
    """``moeroof PATH …`` with every other required argument filled in and ``text`` given to
    ``action`` (``--flag=TEXT``, so that a text starting with '-' is a value, not a flag)."""
    positionals: list[str] = []
    options: list[str] = []
    for other in parser._actions:
        if other is action or isinstance(other, argparse._SubParsersAction):
            continue
        if not other.option_strings and other.nargs not in ("?", "*"):
            positionals += _filler(other)
        elif other.option_strings and other.required:
            options += [other.option_strings[-1], *_filler(other)]
    for group in parser._mutually_exclusive_groups:
        if group.required and action not in group._group_actions:
            first = group._group_actions[0]
            options += [first.option_strings[-1], *_filler(first)]
    flag = action.option_strings[-1]
    given = [f"{flag}={text}"] if not isinstance(action.nargs, int) else [flag, *[text] * action.nargs]
    return [*path, *positionals, *options, *given]


def _fits_argparse(action: argparse.Action, text: str) -> bool:
    """Whether argparse hands ``text`` to the type at all: a flag of several values takes each
    as a word of its own, where a word starting with '-' that is not a negative number is a flag."""
    return not isinstance(action.nargs, int) or not text.startswith("-") or bool(re.fullmatch(r"-\d+|-\d*\.\d+", text))


REFUSED = [
    pytest.param(path, parser, action, text, id=f"{' '.join(path)} {_label(action)}={text[:12]!r}")
    for path, parser, action in DECLARED
    for text in dict.fromkeys(_refused(action.type))
    if _fits_argparse(action, text)
]
TAKEN = [
    pytest.param(path, parser, action, text, value, id=f"{' '.join(path)} {_label(action)}={text[:12]!r}")
    for path, parser, action in DECLARED
    for text, value in _taken(action.type)
    if _fits_argparse(action, text)
]


@pytest.fixture
def parse_only(monkeypatch):
    """``main`` parses but never runs the command: a value wrongly taken fails here."""

    def ran(args, debug):
        raise AssertionError(f"the command ran: {args.argv}")

    monkeypatch.setattr(app, "_run", ran)


# ----------------------------------------------------------------------------- the tests


def test_the_walk_finds_the_declarations():
    """The walk reaches every command (subcommands of ``import`` too) and a few hundred values."""
    names = {path[0] for path, _ in COMMANDS}
    assert names == {name for name, _module in app.COMMAND_MODULES}
    assert ("import", "matrix") in {path for path, _ in COMMANDS}
    assert len(DECLARED) > 100 and len(REFUSED) > 1000 and len(TAKEN) > 300


@pytest.mark.parametrize(("path", "parser", "action", "text"), REFUSED)
def test_a_refused_value_is_one_error_line_and_exit_2(parse_only, capsys, path, parser, action, text):
    argv = _argv(path, parser, action, text)
    assert app.main(argv) == app.EXIT_USAGE, argv
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith(f"error: {_label(action)}: "), (argv, err)


@pytest.mark.parametrize(("path", "parser", "action", "text", "value"), TAKEN)
def test_a_boundary_value_parses(path, parser, action, text, value):
    argv = _argv(path, parser, action, text)
    got = getattr(app.build_parser(argv).parse_args(argv), action.dest)
    assert got == ([value] * action.nargs if isinstance(action.nargs, int) else value), argv


@pytest.mark.parametrize(
    ("path", "parser", "action"), [pytest.param(*d, id=f"{' '.join(d[0])} {_label(d[2])}") for d in DECLARED]
)
def test_a_default_given_as_text_is_taken_by_its_declaration(path, parser, action):
    """argparse runs a text default through the type too: a default out of bounds would refuse
    every command line that leaves the flag out."""
    if isinstance(action.default, str):
        action.type(action.default)


def test_every_numeric_flag_declares_a_constraint():
    """No bare ``type=int`` / ``type=float``, and every flag that takes a number (by its name, or
    by a default that reads as one) declares a constraint: a new flag cannot skip it."""
    numeric = re.compile(
        r"(?:^|_)(?:experts|top_k|layers|tokens|steps|streams|seeds?|batch|ranks|workers|gib|mib|kib|bytes|bits|"
        r"quant|rate|slices|threshold|capacity|warmup|bootstrap|draws|sims|jobs|timeout|context|level|rho|locality|"
        r"speed|seconds|d_model|d_ff|matmul_n|tok_s)(?:$|_)"
    )
    bare, undeclared = [], []
    for path, parser in COMMANDS:
        for action in parser._actions:
            if action.nargs == 0 or isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
                continue  # store_true, --help, --version, the command itself
            where = f"{' '.join(path)} {_label(action)}"
            if action.type in (int, float):
                bare.append(where)
            elif not isinstance(action.type, CONSTRAINTS) and (
                numeric.search(action.dest) or _reads_as_number(action.default)
            ):
                undeclared.append(where)
    assert not bare, f"declare a constraint (moeroof.cli.flags) instead of type=int/float: {bare}"
    assert not undeclared, f"numeric flags without a declared constraint: {undeclared}"


def _reads_as_number(default: Any) -> bool:
    try:
        float(default)
    except (TypeError, ValueError):
        return False
    return True


def test_choices_are_declared_as_choices():
    """A flag added with ``choices=`` refuses another name in one line too: its type is a
    :class:`Choice` of the same names."""
    for path, parser in COMMANDS:
        for action in parser._actions:
            if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
                assert isinstance(action.type, Choice), (path, action.dest)
                assert tuple(action.choices) == action.type.options


def test_the_bounds_are_the_named_limits():
    """Where moeroof.core.limits names a bound, the flags carry it as data."""
    want = {
        "experts": limits.MAX_EXPERTS,
        "top_k": limits.MAX_EXPERTS,
        "layers": limits.MAX_LAYERS,
        "bootstrap": limits.MAX_REPLICATES,
        "draws": limits.MAX_REPLICATES,
        "gof_sims": limits.MAX_REPLICATES,
        "seeds": limits.MAX_FIT_SEEDS,
        "timed_steps": limits.MAX_SIMULATED_STEPS,
    }
    seen = set()
    for path, _parser, action in DECLARED:
        c = action.type
        if action.dest in want:
            assert isinstance(c, Count) and c.max == want[action.dest], (path, action.dest)
            seen.add(action.dest)
        if isinstance(c, BatchList) or (action.dest == "batch" and path[0] in ("split",)):
            assert c.max == limits.MAX_BATCH, (path, action.dest)
        if isinstance(c, Real) and c.unit == "GiB":
            assert c.max == limits.MAX_GIB, (path, action.dest)
    assert seen == set(want)


def test_the_constraints_say_what_they_take():
    assert Count(min=1)("+8") == 8
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'0' is not a positive integer$"):
        Count(min=1)("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'-1' is not a non-negative integer$"):
        Count(min=0)("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^1000001 is more than the 1000000 allowed$"):
        Count(min=0, max=10**6)("1000001")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'1' is not a number in \(0, 1\)$"):
        Real(min=0.0, max=1.0, open_low=True, open_high=True)("1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^1e\+300 GiB is too large"):
        Real(max=limits.MAX_GIB, unit="GiB")("1e300")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected a number or auto, got 'x'$"):
        Real(words=("auto",))("x")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^a size in bytes must be at least 1, got '0.5'$"):
        Bytes()("0.5")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^3 is listed twice in '3,1,3'$"):
        ListOf(Count(), example="0,3", distinct=True)("3,1,3")
    assert Choice(("a", "b"), many=True)("b,a,b") == ("b", "a")


def test_validate_groups_match_the_library():
    """``validate --groups`` spells out the groups (so as not to import the study): the study's."""
    from moeroof.cli import validate as cli_validate
    from moeroof.studies.held_out import GROUPS

    assert cli_validate.GROUPS == GROUPS


def test_an_argparse_usage_error_keeps_its_usage(capsys):
    """Only a value a declaration refuses is said in one line; a missing argument or an unknown
    flag is argparse's usage error, as before."""
    for argv, said in (
        (["union", "--batch", "1", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["trace", "--family", "uniform", "--steps", "2"], "the following arguments are required"),
    ):
        assert app.main(argv) == app.EXIT_USAGE
        err = capsys.readouterr().err
        assert err.startswith("usage: moeroof") and said in err, err
