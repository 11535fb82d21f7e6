"""The critical path of one traced chip: the chain of its spans that set when it finished.

A trace records when work ran, not what waited on what, so the chain is read from the times. Going back from the
chip's end, the span that ends at that moment is the work the chip's next step waited on; the chain continues
from that span's start. Where several spans end at that moment, a compute op is taken before a collective (the
chip's one compute queue released the next op), then the longest. Where none ends there, the chip was waiting on
nothing it traced (another chip, a launch): an ``idle`` segment reaches back to the latest earlier end, and
belongs to the op that follows it. The segments tile ``[0, end]``, so their durations add up to the chip's end
time. Consecutive segments of one op (``L2 fwd ff1``: its GeMM slices, the gathers between them and any waits)
form one run.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from tpusim.experiments.trace_spans import COMPUTE_TRACKS, ChipSpans, TraceSpan

__all__ = ["IDLE", "TOLERANCE_NS", "Run", "Segment", "critical_path", "path_runs"]

TOLERANCE_NS = 1
"""Spans closer than this meet: the trace keeps nanoseconds, so times equal in the run are within it in the file."""
IDLE = "idle"


@dataclass(frozen=True)
class Segment:
    """One span on the path, from its start to where the path leaves it (nanoseconds); ``stall_s``: the HBM stall
    of a compute op, in seconds."""

    kind: str
    name: str
    scope: str
    start: int
    end: int
    stall_s: float = 0.0

    @property
    def duration(self) -> int:
        return self.end - self.start


@dataclass
class Run:
    """Consecutive segments of one op on the path."""

    scope: str
    start: int
    end: int
    spans: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)  # nanoseconds
    stall_s: float = 0.0

    @property
    def duration(self) -> int:
        return self.end - self.start


def critical_path(chip: ChipSpans) -> list[Segment]:
    """The chip's critical path in time order, from 0 to ``chip.end``."""
    by_end = sorted((s for s in (*chip.compute, *chip.comm) if s.end > s.start), key=lambda s: s.end)
    ends = [s.end for s in by_end]
    stalls = {(s.name.removesuffix(" HBM stall"), s.end): s.stall_s for s in chip.stalls}
    path: list[Segment] = []
    at = chip.end
    while at > TOLERANCE_NS:
        first = bisect.bisect_left(ends, at - TOLERANCE_NS)
        ending = [s for s in by_end[first:bisect.bisect_right(ends, at + TOLERANCE_NS)] if s.start < at]
        if ending:
            span = min(ending, key=_preference)
            stall = stalls.get((span.name, span.end), 0.0)
            path.append(Segment(span.kind, span.name, span.scope, span.start, at, stall))
            at = span.start
        else:
            before = ends[first - 1] if first else 0
            path.append(Segment(IDLE, IDLE, IDLE, before, at))
            at = before
    if at > 0:  # a start within the tolerance of 0
        path.append(Segment(IDLE, IDLE, IDLE, 0, at))
    path.reverse()
    # a wait belongs to the op it held up, so that an op's launch gaps do not split its run
    return [replace(s, scope=path[k + 1].scope) if s.kind == IDLE and k + 1 < len(path) else s
            for k, s in enumerate(path)]


def _preference(span: TraceSpan) -> tuple[bool, int, str]:
    return span.track not in COMPUTE_TRACKS, span.start, span.name


def path_runs(path: list[Segment]) -> list[Run]:
    """The path's segments merged into runs of one op each, in time order."""
    runs: list[Run] = []
    for segment in path:
        if not runs or runs[-1].scope != segment.scope:
            runs.append(Run(segment.scope, segment.start, segment.end))
        run = runs[-1]
        run.end = segment.end
        run.spans += 1
        run.by_kind[segment.kind] = run.by_kind.get(segment.kind, 0) + segment.duration
        run.stall_s += segment.stall_s
    return runs
