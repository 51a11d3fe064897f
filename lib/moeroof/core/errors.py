"""The library's own errors. The library names its parameters; only :mod:`moeroof.cli` turns
them into flags, messages and exit codes."""

from __future__ import annotations

__all__ = ["MissingDependency", "ParameterError"]


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
