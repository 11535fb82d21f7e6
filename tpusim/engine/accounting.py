"""Where a chip's time went: compute, exposed communication, idle.

From a chip's MXU spans and the spans during which it waited on a collective, over ``[0, end]``:
``compute`` is MXU-busy time; ``exposed`` is time the MXU was idle while some collective of the chip was
in flight (communication not hidden behind compute); ``idle`` is the rest (launch gaps, imbalance,
waiting on nothing). The three add up to ``end``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TimeBreakdown:
    total: float
    compute: float
    exposed: float
    idle: float


def _union(spans: Sequence[tuple[float, float]], end: float) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, stop in sorted(spans):
        start, stop = max(start, 0.0), min(stop, end)
        if stop <= start:
            continue
        if merged and start <= merged[-1][1]:
            if stop > merged[-1][1]:
                merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged


def _measure(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _minus(spans: list[tuple[float, float]], cut: list[tuple[float, float]]) -> float:
    """Measure of ``spans`` outside ``cut`` (both sorted, disjoint)."""
    total = 0.0
    k = 0
    for start, stop in spans:
        cursor = start
        while k < len(cut) and cut[k][1] <= cursor:
            k += 1
        j = k
        while j < len(cut) and cut[j][0] < stop:
            if cut[j][0] > cursor:
                total += cut[j][0] - cursor
            cursor = max(cursor, cut[j][1])
            j += 1
        if cursor < stop:
            total += stop - cursor
    return total


def breakdown(
    mxu_spans: Sequence[tuple[float, float]], comm_spans: Sequence[tuple[float, float]], end: float
) -> TimeBreakdown:
    """Split ``[0, end]`` into compute, exposed communication and idle."""
    busy = _union(mxu_spans, end)
    waiting = _union(comm_spans, end)
    compute = _measure(busy)
    exposed = _minus(waiting, busy)
    idle = end - compute - exposed
    if idle < 1e-12 * max(end, 1e-300):  # rounding residue of the subtraction, not real idle time
        idle = 0.0
    return TimeBreakdown(end, compute, exposed, idle)
