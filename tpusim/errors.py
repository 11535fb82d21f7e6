"""The exception hierarchy: what went wrong, and which exit status it earns.

User errors (exit 2) carry a one-line message that quotes the bad value (cut to ``ECHO_MAX`` characters by
``echo``), says where it is and what would be valid, plus an optional suggestion line; no line of a message is
longer than ``LINE_MAX`` characters, whatever it quotes. Internal errors (exit 1) are bugs or stuck
schedules; a failed validation is exit 3. This module imports nothing from tpusim so every layer may
raise these.
"""

from __future__ import annotations

from typing import Any

ECHO_MAX = 80
"""The most characters of a value a message quotes (``echo``): enough for any name, path or number a person types,
while a 100,000-character value stays one readable line."""
LINE_MAX = 2000
"""The most characters of one line of a message; the middle of a longer line is cut (values quoted without ``echo``
stay bounded too). The longest message tpusim writes on purpose, a valid list of names, is under 1000."""


def echo(value: Any) -> str:
    """``value`` as a message quotes it: its ``repr``, cut to ``ECHO_MAX`` characters with its full length said."""
    text = repr(value)
    if len(text) <= ECHO_MAX:
        return text
    return f"{text[:ECHO_MAX - 3]}... ({len(text)} characters)"


def bounded(line: str) -> str:
    """``line`` cut in the middle to ``LINE_MAX`` characters."""
    if len(line) <= LINE_MAX:
        return line
    cut = f" ... [{len(line) - LINE_MAX} characters cut] ... "
    keep = (LINE_MAX - len(cut)) // 2
    return line[:keep] + cut + line[-keep:]


class TpusimError(Exception):
    """Base of every error tpusim raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str, suggestion: str | None = None) -> None:
        message = bounded(message)
        super().__init__(message)
        self.message = message
        self.suggestion = None if suggestion is None else bounded(suggestion)

    def lines(self) -> list[str]:
        """The message, then the suggestion if any: what the CLI prints on stderr."""
        return [self.message] + ([self.suggestion] if self.suggestion else [])


class UserError(TpusimError):
    """Bad input from the user: a value, a file, a combination that cannot be simulated."""

    exit_code = 2


class ConfigError(UserError):
    """A YAML file or a configuration value is malformed or names something unknown."""


class UnknownNameError(UserError):
    """A name (hardware profile, model, algorithm, ...) that is not registered."""


class TopologyError(UserError):
    """An illegal slice, topology spec, mesh shape or axis mapping."""


class InfeasibleError(UserError):
    """A configuration that cannot exist: divisibility of heads, batch or slices, non-square Cannon."""


class NonFiniteError(UserError):
    """A time, byte count or ratio that came out infinite or NaN: some input is so extreme that the arithmetic
    overflows a float (the message names it where it can be told)."""


class OutputPathError(UserError):
    """An output path that cannot be written."""


class SimulationError(TpusimError):
    """An internal failure of the simulation itself."""


class DeadlockError(SimulationError):
    """The event queue emptied while some chip program still waited."""


class ValidationFailed(TpusimError):
    """A validation ran and some delta exceeded its tolerance."""

    exit_code = 3


def closest(name: str, known: list[str] | tuple[str, ...]) -> str | None:
    """The known name closest to `name`, for a 'did you mean' suggestion (None if nothing is close)."""
    import difflib

    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return matches[0] if matches else None


def unknown_name(kind: str, name: str, known: list[str] | tuple[str, ...]) -> UnknownNameError:
    """The standard error for an unknown registered name, listing the valid ones."""
    guess = closest(name, known)
    return UnknownNameError(
        f"unknown {kind} {echo(name)}; valid: {', '.join(sorted(known))}",
        f"did you mean {guess!r}?" if guess else None,
    )
