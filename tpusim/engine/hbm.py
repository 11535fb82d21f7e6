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

__all__ = ["HbmLedger", "SharedHbm"]

_SETTLED = 1e-12  # seconds: a stretch below this is rounding, not contention
_MAX_ROUNDS = 200  # fixed-point rounds per check; converges geometrically while DMA stays below HBM bandwidth

SpanDone = Callable[[float, float], None]


class HbmLedger:
    """The DMA bytes each watched chip's HBM serves, as (start, end, bytes) spans of uniform rate; ``traffic`` HBM
    bytes are charged per byte recorded (the profile's ``chip.dma_hbm_traffic``). Only chips that run a program are
    watched: the others (the non-representatives of a symmetric run) never compute, so their DMA slows nothing."""

    def __init__(self, traffic: float = 1.0) -> None:
        self.traffic = traffic
        self._spans: dict[int, list[tuple[float, float, float]]] = {}
        self._watched = np.zeros(0, dtype=bool)

    def watch(self, chip: int) -> None:
        if chip >= len(self._watched):
            self._watched = np.concatenate([self._watched, np.zeros(chip + 1 - len(self._watched), dtype=bool)])
        self._watched[chip] = True
        self._spans.setdefault(chip, [])

    def record(self, chip: int, start: float, end: float, nbytes: float) -> None:
        spans = self._spans.get(chip)
        if spans is not None:
            spans.append((start, end, nbytes * self.traffic))

    def record_many(self, chips: np.ndarray, start: np.ndarray, end: np.ndarray, nbytes: np.ndarray) -> None:
        watched = self._watched
        keep = chips < len(watched)
        keep[keep] = watched[chips[keep]]
        if not keep.any():
            return
        spans = self._spans
        charged = (nbytes[keep] * self.traffic).tolist()
        for chip, s, e, b in zip(chips[keep].tolist(), start[keep].tolist(), end[keep].tolist(), charged,
                                 strict=True):
            spans[chip].append((s, e, b))

    def total(self, chip: int) -> float:
        """DMA bytes of ``chip`` still held (every span, until queries over later windows forget the early ones)."""
        return sum(nbytes for _, _, nbytes in self._spans.get(chip, ()))

    def bytes_between(self, chip: int, lo: float, hi: float) -> float:
        """DMA bytes of ``chip`` inside [lo, hi]; forgets spans that end by ``lo`` (a chip's ops only move on)."""
        spans = self._spans.get(chip)
        if not spans:
            return 0.0
        total = 0.0
        kept = []
        for span in spans:
            start, end, nbytes = span
            if end <= lo:
                continue
            kept.append(span)
            if start >= hi:
                continue
            overlap = min(end, hi) - max(start, lo)
            if overlap > 0:
                total += nbytes * overlap / (end - start)
        self._spans[chip] = kept
        return total


class SharedHbm:
    """The contended compute ops of one simulation: per chip a queue of ops settled against the ledger."""

    def __init__(self, env: simpy.Environment, bandwidth: float, op_overhead: float, traffic: float = 1.0) -> None:
        self.env = env
        self.bandwidth = bandwidth
        self.op_overhead = op_overhead
        self.ledger = HbmLedger(traffic)
        self._tail: dict[int, simpy.Event] = {}

    def occupy(self, chip: Chip, seconds: float, hbm_bytes: float, value: Any, on_span: SpanDone) -> simpy.Event:
        """Queue an op of ``seconds`` uncontended that moves ``hbm_bytes`` on ``chip``; the event fires with
        ``value`` when it ends, after ``on_span(start, end)``."""
        done = self.env.event()
        previous = self._tail.get(chip.id)
        self._tail[chip.id] = done

        def begin(_: object = None) -> None:
            self._run(chip, self.env.now, seconds, hbm_bytes, lambda start, end: self._finish(
                chip, start, end, seconds, on_span, done, value))

        if previous is None or previous.callbacks is None:
            begin()
        else:
            previous.callbacks.append(begin)
        return done

    def _run(self, chip: Chip, start: float, seconds: float, hbm_bytes: float, finish: SpanDone) -> None:
        def check(_: object = None) -> None:
            now = self.env.now
            end = self.settle(chip, start, seconds, hbm_bytes, now)
            if end > now + _SETTLED:
                self.env.timeout(end - now).callbacks.append(check)
            else:
                finish(start, now)

        end = self.settle(chip, start, seconds, hbm_bytes, start)
        self.env.timeout(end - start).callbacks.append(check)

    def settle(self, chip: Chip, start: float, seconds: float, hbm_bytes: float, now: float) -> float:
        """When an op that started at ``start`` ends given the DMA scheduled so far (at least ``now``)."""
        end = max(now, start + chip.slowdown * seconds)
        floor = self.op_overhead
        for _ in range(_MAX_ROUNDS):
            dma = self.ledger.bytes_between(chip.id, start, end) if hbm_bytes else 0.0
            need = start + chip.slowdown * max(seconds, floor + (hbm_bytes + dma) / self.bandwidth)
            if need <= end + _SETTLED:
                return max(end, need)
            end = need
        return end

    @staticmethod
    def _finish(chip: Chip, start: float, end: float, seconds: float, on_span: SpanDone, done: simpy.Event,
                value: Any) -> None:
        chip.mxu_free_at = end
        chip.mxu_busy += end - start
        stall = end - start - chip.slowdown * seconds
        if stall > _SETTLED:
            chip.hbm_stall += stall
        chip.spans.append((start, end))
        on_span(start, end)
        done.succeed(value)
