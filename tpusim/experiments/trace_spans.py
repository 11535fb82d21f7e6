"""Reading a trace back: the spans of one traced chip, from a Chrome trace file tpusim wrote (``--trace``,
``--trace-best``) or from the same object before it is written.

Owns checking that the object is such a trace (a bad file is one line, exit status 2), choosing the chip (the
critical chip of a step trace when it was traced, else the lowest traced chip), turning its complete events on the
compute, HBM-stall and collective tracks into spans in seconds, and naming the layer and op of a step trace's span
from its name. ICI port tracks are not read: they describe the links, not the chip's time. What the spans amount
to is ``tpusim.experiments.trace_summary``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpusim.config.loader import display_path, read_bounded_text
from tpusim.engine.trace import HBM_STALL, MXU, VECTOR_UNIT, collective_track
from tpusim.errors import UserError, echo

__all__ = ["COMPUTE_TRACKS", "NS", "OTHER", "ChipSpans", "TraceError", "TraceSpan", "chip_spans", "read_trace"]

COMPUTE_TRACKS = (MXU, VECTOR_UNIT)
_COLLECTIVES = collective_track(0).removesuffix("0")  # "collectives axis "
_NS_PER_US = 1000  # trace-event times are microseconds, kept to the nanosecond
NS = 1e9
"""Nanoseconds per second: a span's times divided by it are seconds."""
OTHER = "other"
"""The layer and op of a span whose name says neither (every span of a GeMM trace)."""
_LAYERED = re.compile(r"^L(?P<layer>\d+) (?P<pass>fwd|recompute|bwd-data|bwd-weight|bwd) (?P<op>\S+)")
_ONCE = re.compile(r"^step (?P<op>\S+)")
_WRITTEN = "a trace file written by tpusim's --trace or --trace-best"
_VALID = f"valid: {_WRITTEN}"


class TraceError(UserError):
    """A file or object that is not a trace tpusim wrote, or lacks the chip asked for."""


@dataclass(frozen=True)
class TraceSpan:
    """One span of a chip: ``track`` without its lane suffix, times in whole nanoseconds (what the trace keeps, so
    sums and differences of them are exact); ``op`` is a collective's operation, ``stall_s`` the seconds of an
    HBM-stall span. A collective runs from the moment the chip joined it, as a result's accounting counts it."""

    track: str
    name: str
    start: int
    end: int
    op: str | None = None
    stall_s: float = 0.0

    @property
    def duration(self) -> int:
        return self.end - self.start

    @property
    def kind(self) -> str:
        """``MXU`` or ``vector unit`` for compute, the operation (``all-gather``) for a collective."""
        return self.op if self.op is not None else self.track

    @property
    def layer(self) -> str:
        """``L2`` for a layer's op, ``step`` for an op run once per step, ``other`` otherwise."""
        found = _LAYERED.match(self.name)
        if found:
            return f"L{found['layer']}"
        return "step" if _ONCE.match(self.name) else OTHER

    @property
    def label(self) -> str:
        """The op the span belongs to across layers: ``fwd ff1``, ``bwd-data qkv``, ``step optimizer``."""
        found = _LAYERED.match(self.name)
        if found:
            return f"{found['pass']} {found['op']}"
        once = _ONCE.match(self.name)
        return f"step {once['op']}" if once else OTHER

    @property
    def scope(self) -> str:
        """The op the span belongs to in its layer (``L2 fwd ff1``); the whole name where the name says none."""
        found = _LAYERED.match(self.name) or _ONCE.match(self.name)
        return found.group(0) if found else self.name


@dataclass(frozen=True)
class ChipSpans:
    """What one traced chip did: compute ops, collectives (each from its start until the chip had its data) and
    HBM stalls, each list in start order."""

    chip: int
    name: str
    why: str  # why this chip: asked for, the critical chip, the lowest traced chip
    compute: list[TraceSpan]
    comm: list[TraceSpan]
    stalls: list[TraceSpan]
    about: dict[str, Any]  # the trace's otherData

    @property
    def end(self) -> int:
        """When the chip's last compute op or collective ended, in nanoseconds."""
        return max((s.end for s in (*self.compute, *self.comm)), default=0)


def read_trace(path: Path | str) -> dict[str, Any]:
    """The Chrome trace object in the file at ``path``."""
    import json

    shown = display_path(path)
    text = read_bounded_text(path, "trace", _WRITTEN, "trace_bytes")
    try:
        chrome = json.loads(text)
    except ValueError as error:
        raise TraceError(f"trace file {shown!r} is not JSON ({error}); {_VALID}") from None
    if not isinstance(chrome, dict):
        raise TraceError(f"trace file {shown!r} is not a JSON object with a 'traceEvents' list; {_VALID}")
    return chrome


def chip_spans(chrome: dict[str, Any], chip: int | None, shown: str) -> ChipSpans:
    """The spans of ``chip`` in ``chrome`` (None: the critical chip if traced, else the lowest traced chip);
    ``shown`` names the trace in errors."""
    events = chrome.get("traceEvents")
    if not isinstance(events, list):
        raise TraceError(f"trace file {shown!r} has no 'traceEvents' list; {_VALID}")
    tracks: dict[tuple[Any, Any], str] = {}
    processes: dict[Any, str] = {}
    spans: list[tuple[int, dict[str, Any]]] = []
    for number, event in enumerate(events):
        if not isinstance(event, dict):
            raise TraceError(f"trace file {shown!r}: event {number} is not an object; {_VALID}")
        if event.get("ph") == "M" and isinstance(event.get("args"), dict):
            if event.get("name") == "thread_name":
                tracks[(event.get("pid"), event.get("tid"))] = str(event["args"].get("name"))
            elif event.get("name") == "process_name":
                processes[event.get("pid")] = str(event["args"].get("name"))
        elif event.get("ph") == "X":
            spans.append((number, event))
    per_chip: dict[int, list[tuple[int, dict[str, Any], str]]] = {}
    for number, event in spans:
        track = tracks.get((event.get("pid"), event.get("tid")), "").split(" (")[0]
        if track in (*COMPUTE_TRACKS, HBM_STALL) or track.startswith(_COLLECTIVES):
            pid = event.get("pid")
            if not isinstance(pid, int) or isinstance(pid, bool):
                raise TraceError(f"trace file {shown!r}: event {number} has pid {echo(pid)}, not a chip id; {_VALID}")
            per_chip.setdefault(pid, []).append((number, event, track))
    if not per_chip:
        raise TraceError(f"trace file {shown!r} has no compute or collective spans of any chip; {_VALID}")
    chosen, why = _choose(per_chip, chrome.get("otherData"), chip, shown)
    compute: list[TraceSpan] = []
    comm: list[TraceSpan] = []
    stalls: list[TraceSpan] = []
    for number, event, track in per_chip[chosen]:
        span = _span(number, event, track, shown)
        (stalls if track == HBM_STALL else compute if track in COMPUTE_TRACKS else comm).append(span)
    for kept in (compute, comm, stalls):
        kept.sort(key=lambda s: (s.start, s.end))
    about = chrome.get("otherData")
    return ChipSpans(chosen, processes.get(chosen, f"chip {chosen}"), why, compute, comm, stalls,
                     about if isinstance(about, dict) else {})


def _choose(per_chip: dict[int, Any], about: Any, chip: int | None, shown: str) -> tuple[int, str]:
    """The chip to summarize and why."""
    if chip is not None:
        if chip not in per_chip:
            raise TraceError(f"--chip {chip}: trace file {shown!r} has no chip {chip}; valid: "
                             f"{_ranges(sorted(per_chip))} (the traced chips)")
        return chip, "asked for"
    critical = about.get("critical_chip") if isinstance(about, dict) else None
    if critical in per_chip:
        return int(critical), "the critical chip"
    lowest = min(per_chip)
    return lowest, ("the lowest traced chip" if critical is None
                    else f"the lowest traced chip (the critical chip {critical} was not traced)")


def _span(number: int, event: dict[str, Any], track: str, shown: str) -> TraceSpan:
    ts, dur, args = _number(event.get("ts")), _number(event.get("dur")), event.get("args", {})
    if ts is None or dur is None or dur < 0 or not isinstance(args, dict):
        raise TraceError(f"trace file {shown!r}: event {number} has ts {echo(event.get('ts'))}, dur "
                         f"{echo(event.get('dur'))}: not a span with a start and a duration >= 0 in microseconds; "
                         f"{_VALID}")
    start = round(ts * _NS_PER_US)
    end = round((ts + dur) * _NS_PER_US)  # as a viewer reads it: spans that meet in the file meet here
    name = str(event.get("name", ""))
    if track == HBM_STALL:  # the stall as the chip model recorded it, unrounded
        stall = _number(args.get("stall_s"))
        return TraceSpan(track, name, start, end, stall_s=stall if stall is not None else (end - start) / NS)
    if not track.startswith(_COLLECTIVES):
        return TraceSpan(track, name, start, end)
    waited = _number(args.get("waited_s"))  # the chip joined this long before the last member: it waited on it
    joined = start - round(waited * NS) if waited is not None and waited > 0 else start
    op = args.get("op")
    return TraceSpan(track, name, joined, end, None if op is None else str(op))


def _number(value: Any) -> float | None:
    """``value`` if it is a finite number (not a flag), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _ranges(chips: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    parts: list[str] = []
    start = previous = chips[0]
    for chip in [*chips[1:], None]:
        if chip is not None and chip == previous + 1:
            previous = chip
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if chip is not None:
            start = previous = chip
    return ", ".join(parts)
