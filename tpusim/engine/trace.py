"""Chrome / Perfetto trace recording: one process per chip; tracks for its MXU, vector unit, HBM stalls,
collectives and ICI ports; every collective's link traffic between traced chips drawn as flows.

The tracer is optional and off by default (it costs memory and time). Spans are kept as plain tuples and
written as Chrome trace JSON ("X" complete events, microseconds), loadable in ui.perfetto.dev and
chrome://tracing. Filters restrict recording to some chips and to a time window. A training step sets, per
chip, the label of the op it runs (``scope``, e.g. ``"L2 fwd ff1"``); compute and collectives issued under it
carry that label. Spans that overlap on one track (collectives in flight together) are spread over lanes
(``collectives axis 0 (2)``), since trace viewers draw only nested spans on one track. The file is written
atomically: a reader sees a whole trace or none.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tpusim.engine.hbm import SETTLED
from tpusim.errors import OutputPathError, echo
from tpusim.files import DIRECTORY, target_kind, unsafe_target, write_atomic
from tpusim.limits import LIMITS, limit_of, shorten

if TYPE_CHECKING:
    from tpusim.topology import MeshMapping

Span = tuple[int, str, str, float, float, dict[str, object]]
"""(chip, track, name, start in s, end in s, args)."""

MXU = "MXU"
VECTOR_UNIT = "vector unit"
HBM_STALL = "HBM stall"
_US = 1e6  # trace-event times are microseconds
_NS_DIGITS = 3  # decimals of a microsecond kept: nanoseconds


def collective_track(axis: int) -> str:
    """The track of a chip's collectives on logical axis ``axis``."""
    return f"collectives axis {axis}"


class _Links(Protocol):
    """What the tracer needs of ``tpusim.engine.links.LinkArray``."""

    latency: np.ndarray
    on_transfer: Any


@dataclass(frozen=True)
class Hop:
    """The first transfer of one link program over one directed link whose two chips are traced: the two ends of
    a flow from the sender's ICI port span (``spans[span]``) to the receiver's collective."""

    span: int
    sent: float  # the middle of the transfer's serialization, inside the sender's port span
    dst: int
    axis: int
    op: str
    arrival: float


class _PortUse:
    """What one link program sent over each directed link: first transfer, last end, count, busy seconds."""

    def __init__(self, links: int) -> None:
        self.first: dict[int, tuple[float, float]] = {}
        self.last = np.zeros(links)
        self.count = np.zeros(links, dtype=np.int64)
        self.busy = np.zeros(links)

    def add(self, ids: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        for k in np.flatnonzero(self.count[ids] == 0).tolist():
            self.first.setdefault(int(ids[k]), (float(start[k]), float(end[k])))
        np.add.at(self.count, ids, 1)
        np.add.at(self.busy, ids, end - start)
        np.maximum.at(self.last, ids, end)


@dataclass
class Tracer:
    """Collects spans ``(chip, track, name, start_s, end_s, args)`` and flow hops between traced chips."""

    chips: frozenset[int] | None = None
    window: tuple[float, float] | None = None
    spans: list[Span] = field(default_factory=list)
    chip_names: dict[int, str] = field(default_factory=dict)
    scope: dict[int, str] = field(default_factory=dict)  # label of the op each chip runs now (a step's ops)
    per_collective: bool = False  # ICI ports: one span per collective and port instead of one per transfer
    metadata: dict[str, object] = field(default_factory=dict)  # written as the trace's "otherData"
    hops: list[Hop] = field(default_factory=list)
    _link: tuple[int, int, str, str] | None = None  # (program serial, axis, op, name) of the link program running
    _programs: int = 0
    _drawn: set[tuple[int, int]] = field(default_factory=set)  # (program serial, link) already given a flow
    _starting: dict[tuple[int, str], str] = field(default_factory=dict)  # (axis, op) -> name of the last started
    # port names, link ends, latencies and which receivers are traced, once links are watched
    _ports: tuple[list[str], list[int], list[int], list[float], np.ndarray] | None = None
    _use: dict[int, _PortUse] = field(default_factory=dict)  # by link program serial, while it runs

    def wants(self, chip: int) -> bool:
        return self.chips is None or chip in self.chips

    def record(self, chip: int, track: str, name: str, start: float, end: float, **args: object) -> None:
        if not self.wants(chip):
            return
        if self.window is not None and (end < self.window[0] or start > self.window[1]):
            return
        self.spans.append((chip, track, name, start, end, dict(args)))

    # -- what the engine reports ------------------------------------------------------------------------
    def label(self, chip: int, name: str) -> str:
        """``name`` of work ``chip`` issues now, prefixed with the op it runs (``"L2 fwd ff1 K3/8 gemm"``)."""
        scope = self.scope.get(chip)
        if not scope:
            return name
        return f"{scope} {name}" if name else scope

    def compute(self, chip: int, name: str, start: float, end: float, flops: float, stall: float) -> None:
        """One op of the chip's compute queue: on the MXU track if it has matrix FLOPs, else on the vector-unit
        track; the ``stall`` seconds HBM contention added to it also as a span ending with it."""
        if flops > 0:
            self.record(chip, MXU, name, start, end, flops=flops)
        else:
            self.record(chip, VECTOR_UNIT, name, start, end)
        if stall > SETTLED:
            self.record(chip, HBM_STALL, f"{name} HBM stall", end - stall, end, stall_s=stall)

    def collective(self, chip: int, axis: int, op: str, name: str, start: float, end: float, nbytes: float,
                   group: int, waited: float = 0.0) -> None:
        """A collective from its start to the moment ``chip`` had its data; ``waited``: the seconds ``chip`` had
        waited for the group's other members before the start (recorded where there were any)."""
        more: dict[str, object] = {"waited_s": waited} if waited > SETTLED else {}
        self.record(chip, collective_track(axis), name, start, end, op=op, bytes=nbytes, group=group, **more)

    def starting(self, axis: int, op: str, name: str) -> None:
        """A collective starts on the network: its link program's transfers carry ``name``."""
        self._starting[(axis, op)] = name

    def watch_links(self, links: _Links, ports: list[str], src: np.ndarray, dst: np.ndarray) -> None:
        """Record the transfers of ``links`` whose sender is traced on the sender's ``ports[link]`` track (each,
        or per collective and port), and the first of each link program between two traced chips as a flow hop.
        Call once the chips are set."""
        chosen = None if self.chips is None else np.array(sorted(self.chips), dtype=np.int64)
        sending = np.ones(len(src), dtype=bool) if chosen is None else np.isin(src, chosen)
        receiving = np.ones(len(dst), dtype=bool) if chosen is None else np.isin(dst, chosen)
        self._ports = (ports, src.tolist(), dst.tolist(), np.asarray(links.latency).tolist(), receiving)

        def on_transfer(ids: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
            keep = sending[ids]
            if not keep.any():
                return
            running = self._link
            if running is not None and self.per_collective:
                use = self._use.get(running[0])
                if use is None:
                    use = self._use[running[0]] = _PortUse(len(sending))
                use.add(ids[keep], start[keep], end[keep])
                return
            for link, s, e in zip(ids[keep].tolist(), start[keep].tolist(), end[keep].tolist(), strict=True):
                self._port_span(running, link, s, e, e, {"link": link})

        links.on_transfer = on_transfer

    def _port_span(self, running: tuple[int, int, str, str] | None, link: int, start: float, first_end: float,
                   end: float, args: dict[str, object]) -> None:
        """A span on ``link``'s sender port; a flow hop for the first transfer of a program between traced chips."""
        assert self._ports is not None
        ports, sources, targets, latency, receiving = self._ports
        at = len(self.spans)
        self.record(sources[link], ports[link], running[3] if running is not None else "transfer", start, end,
                    **args)
        if running is None or len(self.spans) == at or not receiving[link] or (running[0], link) in self._drawn:
            return
        self._drawn.add((running[0], link))
        self.hops.append(Hop(at, (start + first_end) / 2, targets[link], running[1], running[2],
                             first_end + latency[link]))

    def _close_program(self, tag: tuple[int, int, str, str]) -> None:
        """One span per port a finished link program used (``per_collective``): first start to last end."""
        use = self._use.pop(tag[0], None)
        if use is None:
            return
        for link, (start, first_end) in sorted(use.first.items()):
            self._port_span(tag, link, start, first_end, float(use.last[link]),
                            {"link": link, "transfers": int(use.count[link]), "busy_s": float(use.busy[link])})

    def link_program(self, body: Generator[Any, Any, Any], axis: int, op: str) -> Generator[Any, Any, Any]:
        """``body`` (a link program's SimPy process body) with every transfer it makes attributed to it."""
        self._programs += 1
        tag = (self._programs, axis, op, self._starting.get((axis, op), op))
        value: Any = None
        error: BaseException | None = None
        while True:
            self._link = tag
            try:
                event = body.send(value) if error is None else body.throw(error)
            except StopIteration as stop:
                self._close_program(tag)
                return stop.value
            finally:
                self._link = None
            error = None
            try:
                value = yield event
            except BaseException as thrown:  # an interrupt: hand it to the body
                error, value = thrown, None

    def name_chips(self, mapping: MeshMapping, mark: dict[int, str] | None = None) -> None:
        """Name each chip's process ``chip 5 (1,2)`` by its logical mesh coordinates (i, j, and the replica d in a
        pod layout), with ``mark`` appended."""
        chips = range(mapping.num_chips) if self.chips is None else sorted(self.chips)
        for chip in chips:
            where = ",".join(str(k) for k in mapping.index_of(chip))
            extra = (mark or {}).get(chip)
            self.chip_names[chip] = f"chip {chip} ({where})" + (f" {extra}" if extra else "")

    # -- output -----------------------------------------------------------------------------------------
    def to_chrome(self) -> dict[str, Any]:
        """The trace as a Chrome trace-event JSON object."""
        lanes = _lanes(self.spans)
        tids: dict[tuple[int, str], int] = {}
        for chip, track in sorted({(s[0], lanes[k]) for k, s in enumerate(self.spans)},
                                  key=lambda key: (key[0], _track_order(key[1]))):
            tids[(chip, track)] = sum(1 for c, _ in tids if c == chip) + 1
        events: list[dict[str, Any]] = []
        for chip in sorted({c for c, _ in tids}):
            label = self.chip_names.get(chip, f"chip {chip}")
            events.append({"ph": "M", "name": "process_name", "pid": chip, "args": {"name": label}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": chip, "args": {"sort_index": chip}})
        for (chip, track), tid in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": chip, "tid": tid, "args": {"name": track}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": chip, "tid": tid,
                           "args": {"sort_index": tid}})
        for k, (chip, _, name, start, end, args) in enumerate(self.spans):
            ts = _us(start)  # the end rounded too, so spans that meet in seconds meet in the file
            events.append({
                "ph": "X", "pid": chip, "tid": tids[(chip, lanes[k])], "name": name,
                "ts": ts, "dur": round(max(_us(end) - ts, 0.0), _NS_DIGITS), "args": args,
            })
        events += self._flows(lanes, tids)
        chrome: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ns"}
        if self.metadata:
            chrome["otherData"] = self.metadata
        return chrome

    def _flows(self, lanes: list[str], tids: dict[tuple[int, str], int]) -> list[dict[str, Any]]:
        """Flow events from each hop's sender port span to the receiver's span of the same collective that
        covers the arrival; a hop whose receiver has no such span (it did not run a program) draws none."""
        received: dict[tuple[int, int, str], list[tuple[float, float, int]]] = {}
        for k, (chip, track, _, start, end, args) in enumerate(self.spans):
            if track.startswith("collectives axis "):
                key = (chip, int(track.split()[2]), str(args.get("op")))
                received.setdefault(key, []).append((start, end, tids[(chip, lanes[k])]))
        for spans in received.values():
            spans.sort()
        events: list[dict[str, Any]] = []
        for hop in self.hops:
            src, _, name = self.spans[hop.span][:3]
            target = _covering(received.get((hop.dst, hop.axis, hop.op), []), hop.arrival)
            if target is None:
                continue
            start, end, tid = target
            ident = len(events) // 2 + 1
            common = {"id": ident, "name": name, "cat": "collective"}
            events.append({"ph": "s", "pid": src, "tid": tids[(src, lanes[hop.span])], "ts": _us(hop.sent),
                           **common})
            events.append({"ph": "f", "bp": "e", "pid": hop.dst, "tid": tid,
                           "ts": _us(min(max(hop.arrival, start), end)), **common})
        return events

    def write(self, path: Path) -> dict[str, Any]:
        """Write the trace to ``path`` atomically; returns the object written (``to_chrome``)."""
        chrome = self.to_chrome()
        write_atomic(path, json.dumps(chrome, separators=(",", ":"), allow_nan=False), "trace file")
        return chrome


def _us(seconds: float) -> float:
    """Seconds as trace-event microseconds, to the nanosecond (finer digits only lengthen the file)."""
    return round(seconds * _US, _NS_DIGITS)


def _track_order(track: str) -> tuple[int, str]:
    """Compute first, then collectives by axis, then ICI ports, each group by name."""
    for rank, prefix in enumerate((MXU, VECTOR_UNIT, HBM_STALL, "collectives axis ", "ICI ")):
        if track.startswith(prefix):
            return rank, track
    return 5, track


def _lanes(spans: list[Span]) -> list[str]:
    """Each span's track, spans that overlap an earlier one on their track moved to a lane ``TRACK (n)``."""
    by_track: dict[tuple[int, str], list[int]] = {}
    for k, span in enumerate(spans):
        by_track.setdefault((span[0], span[1]), []).append(k)
    lanes = [span[1] for span in spans]
    for (_, track), indices in by_track.items():
        ends: list[float] = []  # the end of the last span of each lane
        for k in sorted(indices, key=lambda k: (spans[k][3], -spans[k][4])):
            start, end = spans[k][3], spans[k][4]
            lane = next((n for n, last in enumerate(ends) if last <= start), len(ends))
            if lane == len(ends):
                ends.append(end)
            ends[lane] = end
            lanes[k] = track if lane == 0 else f"{track} ({lane + 1})"
    return lanes


def _covering(spans: list[tuple[float, float, int]], when: float) -> tuple[float, float, int] | None:
    """The latest-starting span (sorted by start) that covers ``when``."""
    at = bisect.bisect_right(spans, (when, float("inf"), 0))
    for k in range(at - 1, -1, -1):
        if spans[k][1] >= when - SETTLED:
            return spans[k]
    return None


def row_and_column(mapping: MeshMapping, chip: int) -> frozenset[int]:
    """``chip`` with every chip of its logical row and column (and, in a pod layout, its data-parallel group): all
    the chips its collectives run with."""
    i, j, *replica = mapping.index_of(chip)
    d = replica[0] if replica else 0
    rows, cols = mapping.shape
    return frozenset({mapping.chip(i, c, d) for c in range(cols)} | {mapping.chip(r, j, d) for r in range(rows)}
                     | {mapping.chip(i, j, e) for e in range(mapping.data)})


def check_output_file(path: Path, subject: str, when_folder: str) -> None:
    """Fail before any simulation if a file cannot be written to ``path``: each message starts with ``subject``
    (``"trace path 'x.json'"``), followed by ``when_folder`` where ``path`` is a folder. A device node, FIFO,
    socket or symbolic link is refused as ``tpusim.files`` refuses it (the write would replace it)."""
    kind = target_kind(path)
    if kind is not None and kind != DIRECTORY:
        raise unsafe_target(subject, kind)
    if path.is_dir():
        raise OutputPathError(f"{subject} {when_folder}")
    if not path.parent.is_dir():
        raise OutputPathError(f"{subject}: folder {str(path.parent)!r} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OutputPathError(f"{subject} is not writable; give a path in a writable folder")


def check_trace_path(path: Path) -> None:
    """Fail before any simulation if a trace cannot be written to ``path``."""
    check_output_file(path, f"trace path {str(path)!r}", "is a directory; give a file path such as trace.json")


def parse_chip_list(text: str) -> frozenset[int]:
    """``"0,3,5-7"`` -> {0, 3, 5, 6, 7}; raises ValueError quoting the text. Every range is checked before any is
    expanded: a chip id must be below the ``chips`` limit (no mesh has more chips), so ``0-1000000000`` is refused
    at once instead of building a billion-element set."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        try:
            lo, hi = (int(x) for x in part.split("-", 1)) if "-" in part else (int(part), int(part))
        except ValueError:
            raise ValueError(f"chip list {echo(text)} is not like '0,3,5-7'") from None
        if hi < lo:
            raise ValueError(f"chip list {echo(text)}: range {echo(part)} runs backwards; write it "
                             f"low-high ('{shorten(str(hi))}-{shorten(str(lo))}')")
        ranges.append((lo, hi))
    if any(lo < 0 for lo, _ in ranges):
        raise ValueError(f"chip list {echo(text)} has a negative chip id")
    bound = limit_of("chips")
    highest = max(hi for _, hi in ranges)
    if highest >= bound:
        raise ValueError(f"chip list {echo(text)} names chip {shorten(str(highest))}, beyond any mesh within the "
                         f"limit of {bound} chips; valid: chip ids 0-{bound - 1} of the traced mesh (raise the limit "
                         f"with {LIMITS['chips'].env}=N, see docs/limits.md)")
    return frozenset(chip for lo, hi in ranges for chip in range(lo, hi + 1))
