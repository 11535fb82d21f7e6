"""Timelines of a run as Chrome / Perfetto trace files: checked before the run, written after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpusim.engine.trace import Tracer, check_trace_path, parse_chip_list
from tpusim.errors import OutputPathError, UserError, echo

__all__ = ["check_trace_chips", "finish_trace", "start_trace"]


def start_trace(path: str | Path | None, chips: str | None, flag: str = "--trace") -> Tracer | None:
    """A tracer for ``path`` (None: no trace), recording only ``chips`` (e.g. ``"0,3,5-7"``) when given; ``flag``
    is the option that names the file. The Python API hands these over as given, so their types are checked here
    (a number as the path used to be a raw TypeError)."""
    name = flag.lstrip("-").replace("-", "_")
    if path is not None and not isinstance(path, str | Path):
        raise UserError(f"{name} {echo(path)} must be a file path (a str or pathlib.Path) or None")
    if chips is not None and not isinstance(chips, str):
        raise UserError(f"trace_chips {echo(chips)} must be a chip list like '0,3,5-7' (a str) or None")
    if path is None:
        if chips:
            raise UserError(f"trace chips {chips!r} need a trace file ({flag} FILE)")
        return None
    check_trace_path(Path(path))
    try:
        return Tracer(chips=parse_chip_list(chips) if chips else None)
    except ValueError as error:
        raise UserError(f"trace chips: {error}") from None


def check_trace_chips(tracer: Tracer | None, chips: int, mesh: str) -> None:
    """Refuse, before simulating, traced chips the mesh of ``chips`` chips does not have."""
    if tracer is None or not tracer.chips:
        return
    missing = max(tracer.chips)
    if missing >= chips:
        raise UserError(f"trace chips: chip {missing} does not exist on the {mesh} mesh; valid: 0-{chips - 1}")


def finish_trace(tracer: Tracer | None, path: str | Path | None, result: Any) -> dict[str, Any] | None:
    """Write the trace (atomically: a whole file or none) and say so in the result's notes; returns the Chrome
    trace object written (None without a trace)."""
    if tracer is None or path is None:
        return None
    try:
        chrome = tracer.write(Path(path))
    except OSError as error:  # a full disk, a file size limit, a read-only file system: the run's result stands
        raise OutputPathError(f"cannot write the trace file {str(path)!r}: {error.strerror or error}; an earlier file "
                              "there is unchanged") from None
    result.notes.append(f"trace written to {path}")
    return chrome
