"""Timelines of a run as Chrome / Perfetto trace files: checked before the run, written after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpusim.engine.trace import Tracer, check_trace_path, parse_chip_list
from tpusim.errors import UserError

__all__ = ["finish_trace", "start_trace"]


def start_trace(path: str | Path | None, chips: str | None) -> Tracer | None:
    """A tracer for ``path`` (None: no trace), recording only ``chips`` (e.g. ``"0,3,5-7"``) when given."""
    if path is None:
        if chips:
            raise UserError(f"trace chips {chips!r} need a trace file (--trace FILE)")
        return None
    check_trace_path(Path(path))
    try:
        return Tracer(chips=parse_chip_list(chips) if chips else None)
    except ValueError as error:
        raise UserError(f"trace chips: {error}") from None


def finish_trace(tracer: Tracer | None, path: str | Path | None, result: Any) -> None:
    """Write the trace and say so in the result's notes."""
    if tracer is None or path is None:
        return
    tracer.write(Path(path))
    result.notes.append(f"trace written to {path}")
