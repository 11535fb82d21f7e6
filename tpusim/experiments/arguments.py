"""Type checks of the Python API's arguments to ``run_experiment``: a wrong type is a one-line ``UserError``.

The command line hands these over already parsed; a Python caller can pass anything, and a wrong type must not
surface as a TypeError deep inside a run (nor a truthy string such as ``resume="no"`` be taken as yes).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tpusim.config import Experiment
from tpusim.errors import UserError, echo

__all__ = ["MAX_WAIT_S", "check_run_arguments"]


def _path(name: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, str | Path):
        shown = "a path (str or pathlib.Path)" + (" or None" if optional else "")
        raise UserError(f"{name} {echo(value)} must be {shown}")
    if isinstance(value, str) and not value.strip():  # Path("") is the current folder: never meant
        raise UserError(f"{name} {value!r} is empty; give the folder's path (it is created if missing)")


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise UserError(f"{name} {value!r} must be True or False")


MAX_WAIT_S = 1e6
"""The longest ``--timeout`` and ``--connect-timeout`` (about 11.6 days): the waits behind them count milliseconds
in a C int (``poll``: 2**31 ms, about 24.8 days), and a longer one ends in OverflowError."""


def _seconds(flag: str, value: Any) -> None:
    # an int is finite however large (math.isfinite would overflow converting 10**400 to a float)
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not finite or value <= 0:
        raise UserError(f"{flag} {echo(value)} must be a finite number of seconds > 0")
    if value > MAX_WAIT_S:
        raise UserError(f"{flag} {echo(value)} is too long; valid: seconds > 0 and <= {MAX_WAIT_S:g}")


def check_run_arguments(experiment: Any, out: Any, *, jobs: Any, resume: Any, yes: Any, progress: Any,
                        cache: Any, scheduler: Any, force: Any = False, timeout: Any = None,
                        connect_timeout: Any = 1.0) -> None:
    """Refuse arguments of the wrong type, naming the argument and what it must be."""
    if not isinstance(experiment, Experiment):
        _path("experiment", experiment, optional=False)
    _path("out", out, optional=False)
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise UserError(f"jobs {jobs!r} must be an integer >= 1")
    if jobs < 1:
        raise UserError(f"--jobs {jobs} must be an integer >= 1")
    if timeout is not None:
        _seconds("--timeout", timeout)
    _seconds("--connect-timeout", connect_timeout)
    _flag("resume", resume)
    _flag("yes", yes)
    _flag("force", force)
    if progress is not None and not callable(progress):
        raise UserError(f"progress {progress!r} must be a function (done, total) or None")
    _path("cache", cache, optional=True)
    if scheduler is not None and not isinstance(scheduler, str):
        raise UserError(f"scheduler {scheduler!r} must be an address such as 'tcp://host:8786' or None")
