"""How a request is run, as opposed to what it simulates: worker processes, the executor, resuming, time limits.

A request model (``tpusim.config.requests``) says what is simulated and is recorded with its results; these
options change only how the work is spread and watched, never a result, so they have models of their own:
``WorkerOptions`` for a search (``tune``, ``plan``: ``jobs``) and ``RunOptions`` for an experiment file
(``run``, ``reproduce``). The command line parses their flags' text; a Python caller can pass anything, so each
value is checked here, and the first wrong one is a one-line ``UserError`` naming it (exit status 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, model_validator

from tpusim.config.loader import FrozenModel
from tpusim.errors import UserError, echo

__all__ = ["DASK_CONNECT_TIMEOUT_S", "EXECUTORS", "MAX_WAIT_S", "RunOptions", "WorkerOptions"]

MAX_WAIT_S = 1e6
"""The longest ``--timeout`` and ``--connect-timeout`` (about 11.6 days): the waits behind them count milliseconds
in a C int (``poll``: 2**31 ms, about 24.8 days), and a longer one ends in OverflowError."""
DASK_CONNECT_TIMEOUT_S = 10.0
"""How long connecting to a Dask scheduler may take before the run gives up (``--connect-timeout``), and how long
the run waits on a scheduler that has no worker."""
EXECUTORS = ("local", "dask")


def _jobs(flag: str) -> Callable[[Any], int]:
    """A worker count: an integer (True is not one) >= 1; a count below 1 is named ``flag``."""

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"jobs {value!r} must be an integer >= 1")
        if value < 1:
            raise UserError(f"{flag} {value} must be an integer >= 1")
        return value

    return check


def _seconds(flag: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None and flag == "--timeout":  # no limit
            return value
        # an int is finite however large (math.isfinite would overflow converting 10**400 to a float)
        finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if isinstance(value, bool) or not finite or value <= 0:
            raise UserError(f"{flag} {echo(value)} must be a finite number of seconds > 0")
        if value > MAX_WAIT_S:
            raise UserError(f"{flag} {echo(value)} is too long; valid: seconds > 0 and <= {MAX_WAIT_S:g}")
        return value

    return check


def _flag(name: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise UserError(f"{name} {value!r} must be True or False")
        return value

    return check


def _scheduler(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise UserError(f"scheduler {value!r} must be an address such as 'tcp://host:8786' or None")
    return value


def _executor(value: Any) -> Any:
    if value not in EXECUTORS:
        raise UserError(f"--executor {value!r} is unknown; valid: {', '.join(EXECUTORS)}")
    return value


class WorkerOptions(FrozenModel):
    """How a search (``tune``, ``plan``) runs: ``jobs`` worker processes simulate (the result is the same)."""

    jobs: Annotated[int, BeforeValidator(_jobs("jobs"))] = 1


class RunOptions(FrozenModel):
    """How the points of an experiment file run (``run``, ``reproduce``), checked in this order."""

    jobs: Annotated[int, BeforeValidator(_jobs("--jobs"))] = 1
    timeout: Annotated[int | float | None, BeforeValidator(_seconds("--timeout"))] = None
    connect_timeout: Annotated[int | float, BeforeValidator(_seconds("--connect-timeout"))] = DASK_CONNECT_TIMEOUT_S
    resume: Annotated[bool, BeforeValidator(_flag("resume"))] = False
    yes: Annotated[bool, BeforeValidator(_flag("yes"))] = False
    force: Annotated[bool, BeforeValidator(_flag("force"))] = False
    scheduler: Annotated[str | None, BeforeValidator(_scheduler)] = None
    executor: Annotated[Literal["local", "dask"], BeforeValidator(_executor)] = "local"

    @model_validator(mode="after")
    def _executor_takes_them(self) -> Self:
        if self.scheduler is not None and self.executor != "dask":
            raise UserError(f"--scheduler {self.scheduler!r} needs --executor dask (the {self.executor} executor runs "
                            "here)")
        if self.timeout is not None and self.executor == "dask":
            raise UserError(f"--timeout {self.timeout:g} needs the local executor: a Dask task cannot be stopped "
                            "once it runs")
        return self
