"""The library's own errors. The library names its parameters; only :mod:`moeroof.cli` turns
them into flags, messages and exit codes."""

from __future__ import annotations

__all__ = ["MissingDependency", "ParameterError", "wraps_interrupt"]


class ParameterError(ValueError):
    """A bad value for a named parameter of a library function (``rank_speed``, ``ranks``, …).

    ``str(err)`` reads ``parameter: what is wrong``; ``err.parameter`` is the name, so a command
    line can say which of its flags carried the value.
    """

    def __init__(self, parameter: str, message: str):
        self.parameter = parameter
        self.detail = message
        super().__init__(f"{parameter}: {message}")


class MissingDependency(ValueError):
    """An optional package a command needs is not installed; the message names the extra that
    installs it (:func:`moeroof.core.optional.require`)."""


def wraps_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is or wraps a KeyboardInterrupt: a Ctrl-C that lands inside an extension or
    a callback can surface as another exception (``SystemError: ... returned a result with an
    exception set``), the interrupt as its cause or context. A handler that keeps going after an
    ``Exception`` (a sweep's failed point) must let such an interrupt through."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False
