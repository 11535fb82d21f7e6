"""Handles of work in flight: SimPy events that also say, at once, what they will deliver.

A collective returns a handle immediately and completes in the background. Its ``expected`` tensor (shape and
dtype, no data) is known from the caller's input alone, which lets a GeMM start on an operand still in flight
(the ``ideal`` prefetch accounting) and lets a program split a pending result into pending pieces.
"""

from __future__ import annotations

import simpy

from tpusim.engine.tensor import Tensor

__all__ = ["Pending", "PendingTimeout", "expected_of"]


class Pending(simpy.Event):
    """An event that will succeed with a tensor shaped like ``expected``."""

    def __init__(self, env: simpy.Environment, expected: Tensor) -> None:
        super().__init__(env)
        self.expected = expected


class PendingTimeout(simpy.Timeout):
    """A timeout that succeeds with ``value`` after ``delay``; ``expected`` is that value's shape."""

    def __init__(self, env: simpy.Environment, delay: float, value: Tensor) -> None:
        super().__init__(env, delay, value)
        self.expected = value


def expected_of(item: Tensor | simpy.Event) -> Tensor:
    """The tensor an operand is or will be."""
    if isinstance(item, Tensor):
        return item
    if isinstance(item, Pending | PendingTimeout):
        return item.expected
    raise TypeError(f"{item!r} is neither a tensor nor a pending tensor")
