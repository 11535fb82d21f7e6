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
runs it again with every line of that axis, which later runs of the same placement keep from the start (the
context's memo remembers the axis). Runs that report per-link figures (a trace, a link map) keep every line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["LineConflict", "LineSymmetry", "with_lines"]

T = TypeVar("T")


class LineConflict(Exception):  # a signal to run again, never an error a user sees
    """A run that left lines out of ``axis`` also ran a ring operation over them: its times are not exact."""

    def __init__(self, axis: int) -> None:
        super().__init__(f"logical axis {axis}")
        self.axis = axis


@dataclass
class LineSymmetry:
    """Which logical axes of one run had lines left out, and which ran ring operations; ``blocked`` axes keep
    every line (an earlier run of the same placement rang them)."""

    blocked: frozenset[int] = frozenset()
    reduced: set[int] = field(default_factory=set)
    ringed: set[int] = field(default_factory=set)

    def leaving_out(self, axis: int) -> bool:
        """A dimensional collective on ``axis`` may leave lines out: whether it does."""
        if axis in self.blocked:
            return False
        if axis in self.ringed:
            raise LineConflict(axis)
        self.reduced.add(axis)
        return True

    def ringing(self, axis: int) -> None:
        """A ring operation runs on ``axis``, over every line of its groups."""
        if axis in self.reduced:
            raise LineConflict(axis)
        self.ringed.add(axis)


def with_lines(run: Callable[[LineSymmetry | None], T], memo: dict[Any, Any], placement: object) -> T:
    """``run`` leaving lines out where exact; an axis found to be rung (``LineConflict``) is remembered in ``memo``
    for later runs of ``placement`` (a mapping), and the run starts again with every line of it."""
    ringed = _ringed_axes(memo, placement)
    while True:
        try:
            return run(LineSymmetry(frozenset(ringed)))
        except LineConflict as conflict:
            ringed.add(conflict.axis)


def _ringed_axes(memo: dict[Any, Any], placement: object) -> set[int]:
    """The axes of ``placement`` (a mapping) that runs sharing ``memo`` found rung, kept in ``memo``."""
    key = ("ringed axes", id(placement))
    hit = memo.get(key)
    if hit is None or hit[0] is not placement:  # the stored placement keeps its id from being reused
        hit = memo[key] = (placement, set())
    axes: set[int] = hit[1]
    return axes
