"""Each chip's HBM shared by its compute ops and its collective DMA (docs/chip.md#hbm-contention).

Collective traffic claims HBM bytes when the links schedule it: a byte sent is read from HBM on the sending chip
over the transfer's serialization, a byte received is written on the receiving chip, and a reduction reads two
operands and writes one while it adds. The DMA engines are served first (an ICI transfer proceeds at its link's
rate, which is well below HBM's); a compute op that overlaps such traffic gets the rest of the bandwidth. Its time
becomes ``max(uncontended, overhead + (own bytes + DMA bytes in its window) / bandwidth)``, the window being the op
itself, so the stretch is a fixed point that the op settles when it would end: transfers scheduled while it ran
may extend it again. The MXU of such a chip is a queue of these ops, each starting when the one before it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from tpusim.engine.chip import Chip

__all__ = ["SETTLED", "DmaWindow", "HbmLedger", "SharedHbm"]

SETTLED = 1e-12  # seconds: a stretch below this is rounding, not contention
_MAX_ROUNDS = 200  # fixed-point rounds per check; converges geometrically while DMA stays below HBM bandwidth

SpanDone = Callable[[float, float], None]


class HbmLedger:
    """The DMA bytes each watched chip's HBM serves, as (start, end, bytes) spans of uniform rate; ``traffic`` HBM
    bytes are charged per byte recorded (the profile's ``chip.dma_hbm_traffic``). Only chips that run a program are
    watched: the others (the non-representatives of a symmetric run) never compute, so their DMA slows nothing.

    Spans live in three Python lists per watched chip (filing one is three appends, the common case: most wake-ups
    of the link executor move a few messages), read into arrays once per query (``window``), where one vectorised
    sum runs over the chip's live spans."""

    def __init__(self, traffic: float = 1.0) -> None:
        self.traffic = traffic
        self._row = np.full(0, -1, dtype=np.int64)  # by chip id: its row, or -1 when not watched
        self._row_of: dict[int, int] = {}  # the same for scalar lookups: the rows of the watched chips
        self._spans: list[tuple[list[float], list[float], list[float]]] = []  # by row: starts, ends, bytes

    def watch(self, chip: int) -> None:
        if chip >= len(self._row):
            self._row = np.concatenate([self._row, np.full(chip + 1 - len(self._row), -1, dtype=np.int64)])
        if self._row[chip] >= 0:
            return
        self._row[chip] = self._row_of[chip] = len(self._spans)
        self._spans.append(([], [], []))

    def _rows_of(self, chips: np.ndarray) -> np.ndarray:
        rows = np.full(len(chips), -1, dtype=np.int64)
        known = chips < len(self._row)
        rows[known] = self._row[chips[known]]
        return rows

    @property
    def rows(self) -> dict[int, int]:
        """The row of each watched chip (read-only: ``watch`` adds them); scalar callers skip the others."""
        return self._row_of

    def record(self, chip: int, start: float, end: float, nbytes: float) -> None:
        row = self._row_of.get(chip)
        if row is not None:
            self.file_row(row, start, end, nbytes)

    def file_row(self, row: int, start: float, end: float, nbytes: float) -> None:
        """A span of the chip of row ``row`` (``rows``)."""
        starts, ends, carried = self._spans[row]
        starts.append(start)
        ends.append(end)
        carried.append(nbytes * self.traffic)

    def record_many(self, chips: np.ndarray, start: np.ndarray, end: np.ndarray, nbytes: np.ndarray) -> None:
        rows = self._rows_of(chips)
        keep = rows >= 0
        if not keep.any():
            return
        spans = self._spans
        for row, begin, finish, size in zip(rows[keep].tolist(), start[keep].tolist(), end[keep].tolist(),
                                            (nbytes[keep] * self.traffic).tolist(), strict=True):
            starts, ends, carried = spans[row]
            starts.append(begin)
            ends.append(finish)
            carried.append(size)

    def total(self, chip: int) -> float:
        """DMA bytes of ``chip`` still held (every span, until queries over later windows forget the early ones)."""
        row = self._row_of.get(chip)
        if row is None:
            return 0.0
        return float(np.array(self._spans[row][2], dtype=np.float64).sum())

    def bytes_between(self, chip: int, lo: float, hi: float) -> float:
        """DMA bytes of ``chip`` inside [lo, hi]; forgets spans that end by ``lo`` (a chip's ops only move on)."""
        window = self.window(chip, lo)
        return 0.0 if window is None else window.bytes_until(hi)

    def window(self, chip: int, lo: float) -> DmaWindow | None:
        """The DMA spans of ``chip`` that end after ``lo``, to sum over windows [lo, hi] (None: there are none);
        forgets the spans that end by ``lo``."""
        row = self._row_of.get(chip)
        if row is None:
            return None
        starts, ends, carried = self._spans[row]
        if not ends:
            return None
        start, end, nbytes = np.array(starts), np.array(ends), np.array(carried)
        live = end > lo
        if not live.all():
            start, end, nbytes = start[live], end[live], nbytes[live]
            self._spans[row] = (start.tolist(), end.tolist(), nbytes.tolist())
            if not len(end):
                return None
        return DmaWindow(end, np.maximum(start, lo), nbytes, end - start)


class DmaWindow:
    """A chip's live DMA spans seen from a fixed window start: ``bytes_until(hi)`` sums each span's share of its
    bytes inside [lo, hi] (uniform rate over the span) with the arithmetic of ``HbmLedger.bytes_between``, so an op
    settling against the ledger round after round re-reads nothing."""

    def __init__(self, end: np.ndarray, begin: np.ndarray, nbytes: np.ndarray, width: np.ndarray) -> None:
        self.end = end  # each span's end
        self.begin = begin  # each span's start, or the window's start where later
        self.nbytes = nbytes
        self.width = width  # each span's length

    def bytes_until(self, hi: float) -> float:
        overlap = np.minimum(self.end, hi) - self.begin
        inside = overlap > 0
        if not inside.any():
            return 0.0
        return float(np.sum(self.nbytes[inside] * overlap[inside] / self.width[inside]))


class SharedHbm:
    """The contended compute ops of one simulation: per chip a queue of ops settled against the ledger."""

    def __init__(self, env: simpy.Environment, bandwidth: float, op_overhead: float, traffic: float = 1.0) -> None:
        self.env = env
        self.bandwidth = bandwidth
        self.op_overhead = op_overhead
        self.ledger = HbmLedger(traffic)
        self._tail: dict[int, simpy.Event] = {}

    def occupy(self, chip: Chip, seconds: float, hbm_bytes: float, flops: float, value: Any,
               on_span: SpanDone | None = None) -> simpy.Event:
        """Queue an op of ``seconds`` uncontended that moves ``hbm_bytes`` and executes ``flops`` on ``chip``; the
        event fires with ``value`` when it ends, after ``on_span(start, end)``."""
        done = self.env.event()
        previous = self._tail.get(chip.id)
        self._tail[chip.id] = done

        def begin(_: object = None) -> None:
            self._run(chip, self.env.now, seconds, hbm_bytes, lambda start, end: self._finish(
                chip, start, end, seconds, flops, on_span, done, value))

        if previous is None or previous.callbacks is None:
            begin()
        else:
            previous.callbacks.append(begin)
        return done

    def _run(self, chip: Chip, start: float, seconds: float, hbm_bytes: float, finish: SpanDone) -> None:
        def check(_: object = None) -> None:
            now = self.env.now
            end = self.settle(chip, start, seconds, hbm_bytes, now)
            if end > now + SETTLED:
                self.env.timeout(end - now).callbacks.append(check)
            else:
                finish(start, now)

        end = self.settle(chip, start, seconds, hbm_bytes, start)
        self.env.timeout(end - start).callbacks.append(check)

    def settle(self, chip: Chip, start: float, seconds: float, hbm_bytes: float, now: float) -> float:
        """When an op that started at ``start`` ends given the DMA scheduled so far (at least ``now``)."""
        end = max(now, start + chip.slowdown * seconds)
        floor = self.op_overhead
        window = self.ledger.window(chip.id, start) if hbm_bytes else None
        for _ in range(_MAX_ROUNDS):
            dma = window.bytes_until(end) if window is not None else 0.0
            need = start + chip.slowdown * max(seconds, floor + (hbm_bytes + dma) / self.bandwidth)
            if need <= end + SETTLED:
                return max(end, need)
            end = need
        return end

    @staticmethod
    def _finish(chip: Chip, start: float, end: float, seconds: float, flops: float, on_span: SpanDone | None,
                done: simpy.Event, value: Any) -> None:
        chip.ran(start, end, flops)
        stall = end - start - chip.slowdown * seconds
        if stall > SETTLED:
            chip.hbm_stall += stall
        if on_span is not None:
            on_span(start, end)
        done.succeed(value)
