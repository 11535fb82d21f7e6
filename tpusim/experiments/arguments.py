"""Type checks of the Python API's arguments to ``run_experiment``: a wrong type is a one-line ``UserError``.

The command line hands these over already parsed; a Python caller can pass anything, and a wrong type must not
surface as a TypeError deep inside a run (nor a truthy string such as ``resume="no"`` be taken as yes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpusim.config import Experiment
from tpusim.config.options import RunOptions
from tpusim.errors import UserError, echo

__all__ = ["check_run_arguments"]


def _path(name: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, str | Path):
        shown = "a path (str or pathlib.Path)" + (" or None" if optional else "")
        raise UserError(f"{name} {echo(value)} must be {shown}")
    if isinstance(value, str) and not value.strip():  # Path("") is the current folder: never meant
        raise UserError(f"{name} {value!r} is empty; give the folder's path (it is created if missing)")


def check_run_arguments(experiment: Any, out: Any, options: dict[str, Any], *, progress: Any,
                        cache: Any) -> RunOptions:
    """Refuse arguments of the wrong type, naming the argument and what it must be; the run ``options`` as their
    model (``RunOptions``, which checks them)."""
    if not isinstance(experiment, Experiment):
        _path("experiment", experiment, optional=False)
    _path("out", out, optional=False)
    checked = RunOptions.model_validate(options)
    if progress is not None and not callable(progress):
        raise UserError(f"progress {progress!r} must be a function (done, total) or None")
    _path("cache", cache, optional=True)
    return checked
