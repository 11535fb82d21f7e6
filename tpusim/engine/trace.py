"""Chrome / Perfetto trace recording: one process per chip, one track per MXU and per ICI port.

The tracer is optional and off by default (it costs memory and time). Spans are kept as plain tuples and
written as Chrome trace JSON ("X" complete events, microseconds), loadable in ui.perfetto.dev and
chrome://tracing. Filters restrict recording to some chips and to a time window.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpusim.errors import OutputPathError

Span = tuple[int, str, str, float, float, dict[str, object]]
"""(chip, track, name, start in s, end in s, args)."""


@dataclass
class Tracer:
    """Collects spans ``(chip, track, name, start_s, end_s, args)``."""

    chips: frozenset[int] | None = None
    window: tuple[float, float] | None = None
    spans: list[Span] = field(default_factory=list)
    chip_names: dict[int, str] = field(default_factory=dict)

    def wants(self, chip: int) -> bool:
        return self.chips is None or chip in self.chips

    def record(self, chip: int, track: str, name: str, start: float, end: float, **args: object) -> None:
        if not self.wants(chip):
            return
        if self.window is not None and (end < self.window[0] or start > self.window[1]):
            return
        self.spans.append((chip, track, name, start, end, dict(args)))

    def to_chrome(self) -> dict[str, Any]:
        """The trace as a Chrome trace-event JSON object."""
        events: list[dict[str, Any]] = []
        tracks: dict[tuple[int, str], int] = {}
        for chip, track, _, _, _, _ in self.spans:
            tracks.setdefault((chip, track), len([k for k in tracks if k[0] == chip]) + 1)
        for chip in sorted({c for c, _ in tracks}):
            label = self.chip_names.get(chip, f"chip {chip}")
            events.append({"ph": "M", "name": "process_name", "pid": chip, "args": {"name": label}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": chip, "args": {"sort_index": chip}})
        for (chip, track), tid in sorted(tracks.items()):
            events.append({"ph": "M", "name": "thread_name", "pid": chip, "tid": tid, "args": {"name": track}})
        for chip, track, name, start, end, args in self.spans:
            events.append({
                "ph": "X", "pid": chip, "tid": tracks[(chip, track)], "name": name,
                "ts": start * 1e6, "dur": max(end - start, 0.0) * 1e6, "args": args,
            })
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_chrome()))


def check_trace_path(path: Path) -> None:
    """Fail before any simulation if a trace cannot be written to ``path``."""
    if path.is_dir():
        raise OutputPathError(f"trace path {str(path)!r} is a directory; give a file path such as trace.json")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputPathError(f"trace path {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OutputPathError(f"trace path {str(path)!r} is not writable; give a path in a writable folder")


def parse_chip_list(text: str) -> frozenset[int]:
    """``"0,3,5-7"`` -> {0, 3, 5, 6, 7}; raises ValueError quoting the text."""
    chips: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                chips.update(range(lo, hi + 1))
            else:
                chips.add(int(part))
        except ValueError:
            raise ValueError(f"chip list {text!r} is not like '0,3,5-7'") from None
    if any(c < 0 for c in chips):
        raise ValueError(f"chip list {text!r} has a negative chip id")
    return frozenset(chips)


def spans_of(tracer: Tracer, track_prefix: str) -> Iterable[Span]:
    """Spans whose track starts with ``track_prefix`` (e.g. ``"MXU"``, ``"ICI"``)."""
    return (s for s in tracer.spans if s[1].startswith(track_prefix))
