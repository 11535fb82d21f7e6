"""Symmetric runs leave out the lines of a dimensional collective that run exactly like a kept one.

A collective over a logical axis of several whole physical axes (``collectives.dimensional``) runs, in each phase,
one ring or line per line of the group along a physical axis. In a symmetric run (representative chips only; no
per-chip or per-link override, every logical axis one hop per ring step: ``Network.asymmetry``), every line of one
physical axis starts at the same instant, on links of the same rates, with the same messages behind the same
earlier traffic, so its transfers happen at the same times as every other's, to the last bit. The run therefore
keeps only the lines that hold a representative's rank (whose chips compute and whose arrivals count), and adds the
transfers of the others to the run's count, so every reported figure is the one of the run with every line.

That holds only while no traffic but such collectives uses the lines left out. A ring operation (broadcast, shift,
send-receive, or a collective the profile runs on the snake ring) on the same logical axis runs over a snake ring
that crosses them. A run raises ``LineConflict`` the moment both kinds have met on one axis, and ``with_lines``
runs it again with every line. Runs that report per-link figures (a trace, a link map) keep every line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["LineConflict", "LineSymmetry", "with_lines"]

T = TypeVar("T")


class LineConflict(Exception):  # a signal to run again, never an error a user sees
    """A run that left lines out also ran a ring operation over them: its times are not exact."""


@dataclass
class LineSymmetry:
    """Which logical axes of one run had lines left out, and which ran ring operations."""

    reduced: set[int] = field(default_factory=set)
    ringed: set[int] = field(default_factory=set)

    def leaving_out(self, axis: int) -> None:
        """A dimensional collective on ``axis`` leaves lines out."""
        if axis in self.ringed:
            raise LineConflict(f"logical axis {axis}")
        self.reduced.add(axis)

    def ringing(self, axis: int) -> None:
        """A ring operation runs on ``axis``, over every line of its groups."""
        if axis in self.reduced:
            raise LineConflict(f"logical axis {axis}")
        self.ringed.add(axis)


def with_lines(run: Callable[[bool], T]) -> T:
    """``run(True)`` (lines left out where exact), or ``run(False)`` where that run met a ``LineConflict``."""
    try:
        return run(True)
    except LineConflict:
        return run(False)
